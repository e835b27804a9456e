"""Can this machine run the Tenstorrent track on a card or on tt-lang-sim? What each lacks, one phrase each."""
from __future__ import annotations

from llamanb.platform.hardware import has_module, tenstorrent_devices


def ttnn_missing(module=has_module, devices=tenstorrent_devices,
                 python: tuple[int, int] | None = None) -> tuple[str, ...]:
    """What a real Tenstorrent run lacks here: ttnn (wheels for CPython 3.10/3.12 only) and a card."""
    import sys

    python = python or sys.version_info[:2]
    missing = []
    if not module("ttnn"):
        hint = "" if python in ((3, 10), (3, 12)) else (
            f"; its wheels are for CPython 3.10/3.12, this is {python[0]}.{python[1]}")
        missing.append(f"python module ttnn{hint}")
    if not devices():
        missing.append("a /dev/tenstorrent/* device node (a card and its driver); without a card, "
                       "tenstorrent/ttsim (TT_METAL_SIMULATOR) plus the SFPI kernel compiler, which "
                       "the ttnn wheel lacks (a GitHub release download: tt-lang's ttl/_setup/sfpi.py)")
    return tuple(missing)

def ttlang_sim_missing(module=has_module) -> tuple[str, ...]:
    """TT-Lang kernels on Tenstorrent's functional simulator need only the tt-lang-sim wheel."""
    return () if module("ttl") and module("sim_stats") else (
        "python package tt-lang-sim (pip install tt-lang-sim; the ttlang extra)",)
