"""Calling an external kernel's numpy semantics from a builder's model, lazily."""
from __future__ import annotations


def extern_model(symbol: str):
    """The numpy model of an external C++ kernel (llamanb.npu.compiler.extern), imported on first use."""
    from llamanb.npu.compiler import extern

    return extern.model(symbol)
