"""What a machine has, asked without importing anything: whether a Python module can be found
(`importlib.util.find_spec` looks a module up without running it) and which device nodes exist,
checked on the filesystem; and `Readiness`, the verdict each track's readiness.py gives from them.
The hardware backends import their stacks lazily, when one is actually asked for, so `import
llamanb` works on any laptop.

    AMD NPU2 (XDNA 2)   device: /dev/accel/accel* bound to the amdxdna driver  (amd_npu_devices)
    Tenstorrent         device: /dev/tenstorrent/*                              (tenstorrent_devices)
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path


def has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def amd_npu_devices(root: Path = Path("/sys/class/accel")) -> list[str]:
    """/dev/accel/accelN nodes whose driver is amdxdna (the Ryzen AI NPU driver)."""
    found = []
    for node in sorted(root.glob("accel*")) if root.is_dir() else []:
        driver = node / "device" / "driver"
        if driver.exists() and driver.resolve().name == "amdxdna":
            found.append(f"/dev/accel/{node.name}")
    return found


def tenstorrent_devices(root: Path = Path("/dev/tenstorrent")) -> list[str]:
    return [str(p) for p in sorted(root.iterdir())] if root.is_dir() else []


# ---------------------------------------------------------------- readiness, backend by backend

@dataclass(frozen=True)
class Readiness:
    """Can this machine run backend `name`? `missing` lists what it lacks, one short phrase each
    (empty when ready); `runs_on` says where its arithmetic happens: "host CPU", "emulated" (a
    device simulated on the host CPU, said in its output) or "device" (real hardware)."""
    name: str
    runs_on: str
    missing: tuple[str, ...] = ()
    note: str = ""

    @property
    def ready(self) -> bool:
        return not self.missing

    @property
    def emulated(self) -> bool:
        return self.runs_on == "emulated"

    def line(self) -> str:
        state = "ready" if self.ready else "not ready, missing: " + "; ".join(self.missing)
        return f"{self.name:<18} {self.runs_on:<9} {state}" + (f" -- {self.note}" if self.ready and self.note else "")

    def lines(self, width: int = 120) -> str:
        """`line()` wrapped to `width` columns (a notebook's output column, a terminal): each
        missing piece starts a line of its own under the state, long ones continue indented."""
        import textwrap

        lead = f"{self.name:<18} {self.runs_on:<9} "
        pad = " " * len(lead)
        if self.ready:
            return "\n".join(textwrap.wrap(self.line(), width, subsequent_indent=pad + "   ",
                                            break_on_hyphens=False))
        out = [lead + "not ready, missing:"]
        for m in self.missing:
            out += textwrap.wrap(m, width, initial_indent=pad + "- ", subsequent_indent=pad + "  ",
                                 break_on_hyphens=False)
        return "\n".join(out)
