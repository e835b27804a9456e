"""What this machine can run: the numpy reference always; an AMD NPU or a Tenstorrent card only when
both the software stack and the device are present.

Nothing is imported here: `importlib.util.find_spec` looks a module up without running it, and
device nodes are checked on the filesystem. The hardware backends import their stacks lazily,
when one is actually asked for, so `import llamanb` works on any laptop.

    AMD NPU2 (XDNA 2)   python: pyxrt (XRT bindings) + air (mlir-air)   device: /dev/accel/accel*
                        bound to the amdxdna driver
    Tenstorrent         python: ttnn                                    device: /dev/tenstorrent/*
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Target:
    name: str
    modules: dict[str, bool]            # python module -> importable
    devices: list[str] = field(default_factory=list)
    needs_device: bool = True

    @property
    def software(self) -> bool:
        return all(self.modules.values())

    @property
    def usable(self) -> bool:
        return self.software and (bool(self.devices) or not self.needs_device)

    def summary(self) -> str:
        mods = ", ".join(f"{m} {'found' if ok else 'absent'}" for m, ok in self.modules.items())
        if not self.needs_device:
            dev = "runs on the CPU"
        else:
            dev = f"device {', '.join(self.devices)}" if self.devices else "no device"
        verdict = "present" if self.usable else "absent"
        return f"{self.name:<22} {verdict:<8} ({mods}; {dev})"


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


def probe() -> list[Target]:
    return [
        Target("numpy (reference)", {"numpy": has_module("numpy")}, needs_device=False),
        Target("AMD NPU2 (MLIR-AIR)", {"pyxrt": has_module("pyxrt"), "air": has_module("air")},
               amd_npu_devices()),
        Target("Tenstorrent (ttnn)", {"ttnn": has_module("ttnn")}, tenstorrent_devices()),
    ]


def report() -> str:
    return "\n".join(t.summary() for t in probe())


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
