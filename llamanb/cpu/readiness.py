"""Can this machine build the cpu track's kernels? What it lacks (a C++ compiler), one phrase."""
from __future__ import annotations

from llamanb.platform.cxx_build import CXX_CANDIDATES, find_cxx


def cpu_compiler_missing() -> tuple[str, ...]:
    """The compiled cpu backend needs a C++ compiler: what find_cxx() did not find, if anything,
    as a phrase that reads after "missing:" (`info`) and after "needs" (the `auto` engine's line)."""
    path, why = find_cxx()
    if path:
        return ()
    if "LLAMANB_CXX=none" in why:
        return ("host C++ builds, which are turned off (LLAMANB_CXX=none)",)
    if "$" in why.split("(")[0]:                      # $LLAMANB_CXX or $CXX names a missing one
        return (f"a C++ compiler ({why.removeprefix('no C++ compiler: ')})",)
    return (f"a C++ compiler (none of {', '.join(CXX_CANDIDATES)} is on PATH; install g++ or "
            "name one in $LLAMANB_CXX)",)
