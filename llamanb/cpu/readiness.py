"""Can this machine build the cpu track's kernels? What it lacks (a C++ compiler), one phrase."""
from __future__ import annotations

from llamanb.platform.cxx_build import find_cxx


def cpu_compiler_missing() -> tuple[str, ...]:
    """The compiled cpu backend needs a C++ compiler: what find_cxx() did not find, if anything."""
    path, why = find_cxx()
    return () if path else (why,)
