"""A line per stage of a long step, shown in a notebook while the step runs and gone when it ends.

    with stages() as say:            # in a package function that can take more than ~10 s
        say("converting SmolLM2-135M to float32, once (538 MB into ~/.cache/llamanb)")
        ...
        say("building the cpu kernels")

In a Jupyter kernel the line is one display (`display_id`) that each stage replaces; when the step
ends the display is replaced by an empty bundle, which `llamanb.course.notebooks build` leaves out of the
committed notebook. So an executed notebook keeps the same outputs whether the step was slow (a
cold cache, a loaded machine) or not. nbval, though, keeps the first display and ignores its
updates, so a line shown only because a step ran slowly would read as a changed output:
`LLAMANB_PROGRESS=off` turns the lines off, and notebooks/conftest.py sets it for every nbval run
(the stored outputs are the course's claims; a progress line is not one). `after_s` holds the line back until the step has run that long (for steps that are
usually quick, such as a short generation). Outside a kernel (the command line, pytest) nothing is
shown: commands say what they do themselves.
"""
from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager

MARK = " ..."            # a progress line ends so (tests/lab/silent_cells.py tells them by it)


def in_kernel() -> bool:
    """True in a Jupyter kernel, unless $LLAMANB_PROGRESS is "off"."""
    if os.environ.get("LLAMANB_PROGRESS", "").lower() == "off":
        return False
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and getattr(shell, "kernel", None) is not None


@contextmanager
def stages(after_s: float = 0.0, prefix: str = "llamanb"):
    """Yield say(line): show `prefix: line ...` in place of the previous stage's line, once the
    step has run `after_s` seconds; remove it when the step ends (normally or not)."""
    if not in_kernel():
        yield lambda line: None
        return
    from IPython.display import display

    t0 = time.perf_counter()
    handle = None

    def say(line: str) -> None:
        nonlocal handle
        if time.perf_counter() - t0 < after_s:
            return
        bundle = {"text/plain": f"{prefix}: {line}{MARK}"}
        if handle is None:
            handle = display(bundle, raw=True, display_id=True)
        else:
            handle.update(bundle, raw=True)

    try:
        yield say
    finally:
        if handle is not None:
            handle.update({}, raw=True)


def is_leftover(output) -> bool:
    """An output a finished `stages` block leaves behind: a display with an empty bundle."""
    return output.get("output_type") == "display_data" and not output.get("data")
