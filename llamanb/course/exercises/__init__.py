"""Exercises: one module per chapter (ch01, ch01b, ... ch13, and chA for the appendix), each
holding that chapter's checkers; a chapter split off after NN has its letter (ch04c, ch05b).

    from llamanb.exercises import ch01
    ch01.block_params(my_block_params)       # prints one line: passed / what is wrong / not attempted

Every checker runs the student's function on fixed cases (presets, edge cases, random ones from a
fixed seed) against the finished code in llamanb or closed-form math; `check.Exercise` holds the
mechanics. `EXERCISES` lists each chapter's exercises in notebook order; the solutions live apart,
in solutions/NN_name.py at the repository root.
"""
from __future__ import annotations

import importlib

CHAPTERS = ("ch01", "ch01b", "ch02", "ch03", "ch03b", "ch04", "ch04b", "ch04c", "ch05", "ch05b", "ch06",
            "ch07", "ch08", "ch09", "ch10", "ch11", "ch11b", "ch12", "ch13", "chA")


def chapter(name: str):
    """The checker module of a chapter, e.g. chapter("ch03")."""
    if name not in CHAPTERS:
        raise ValueError(f"unknown chapter {name!r}; known: {', '.join(CHAPTERS)}")
    return importlib.import_module(f"{__name__}.{name}")
