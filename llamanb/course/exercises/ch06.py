"""Chapter 06 exercises: the argument map of a stitched group, and the roles of its arguments.

    group_arguments(members) -> (names, slots)    against llamanb.npu.compiler.stitch.stitch on real kernels
        members: [(label, [kernel argument names], {kernel argument: group argument}), ...]
        names:   the group's arguments in order of first use
        slots:   per member, the group index of each of its kernel arguments (%argN -> %argM)
    derive_roles(events, names) -> {name: role}   against llamanb.npu.compiler.stitch.derive_roles
"""
from __future__ import annotations

import numpy as np

from llamanb.npu.compiler.builders import add, gemv, rmsnorm
from llamanb.npu.compiler.stitch import Member, derive_roles as _derive_roles, stitch
from llamanb.course.exercises.check import Case, Exercise

H = 64


def _kernels() -> dict:
    return {"rmsnorm": rmsnorm(1, H, 1e-5, herd_xy=(1, 1), flat_out=True),   # x, w -> y
            "gemv": gemv(H, H),                                              # a [H, H] @ x -> y
            "add": add(1, H, herd_xy=(1, 1), flat=(True, True, True))}       # a + b -> out


GROUPS = {
    "RMSNorm then the K projection (section 3)": [
        ("norm", "rmsnorm", {"x": "x", "w": "norm_w", "y": "xn"}),
        ("k", "gemv", {"a": "wk", "x": "xn", "y": "k"})],
    "RMSNorm, then Q, K and V from the same normed row": [
        ("norm", "rmsnorm", {"x": "x", "w": "norm_w", "y": "xn"}),
        ("q", "gemv", {"a": "wq", "x": "xn", "y": "q"}),
        ("k", "gemv", {"a": "wk", "x": "xn", "y": "k"}),
        ("v", "gemv", {"a": "wv", "x": "xn", "y": "v"})],
    "a residual: O projection, then add the block input": [
        ("o", "gemv", {"a": "wo", "x": "attn", "y": "o"}),
        ("res", "add", {"a": "x", "b": "o", "out": "h"})],
    "nothing mapped: every argument gets <label>_<name>": [
        ("p", "gemv", {}), ("r", "add", {})],
    "partly mapped, a later member reads an earlier one's default name": [
        ("norm", "rmsnorm", {"x": "x"}),
        ("q", "gemv", {"x": "norm_y"}),
        ("res", "add", {"a": "q_y", "b": "x"})],
}


def _group_cases() -> list[Case]:
    ks = _kernels()
    cases = []
    for label, members in GROUPS.items():
        g = stitch("exercise", [Member(ks[kind], amap, lab) for lab, kind, amap in members])
        names = [a.name for a in g.args]
        slots = [[names.index(n) for n in used] for _, _, used in g.params["members"]]
        student_view = [(lab, [a.name for a in ks[kind].args], dict(amap)) for lab, kind, amap in members]
        cases.append(Case(label, (student_view,), (names, slots)))
    return cases


group_arguments = Exercise(
    "06.1", "group_arguments", _group_cases,
    hint="walk the members in order and their arguments in order; a kernel argument without an "
         "entry in the map is named <label>_<name>; a name seen before reuses its index (that shared "
         "index is the DDR buffer through which one kernel feeds the next)")


def _random_events(rng) -> tuple[list, list]:
    names = [f"g{i}" for i in range(int(rng.integers(3, 7)))]
    events = []
    for _ in range(int(rng.integers(2, 5))):
        used = rng.choice(names, size=int(rng.integers(1, len(names) + 1)), replace=False)
        events.append([(str(n), str(rng.choice(["input", "weight", "output"], p=[0.45, 0.2, 0.35])))
                       for n in used])
    return events, names


def _roles_cases() -> list[Case]:
    cases = []
    ks = _kernels()
    for label, members in list(GROUPS.items())[:3]:
        events, names = [], []
        for lab, kind, amap in members:
            ev = [(amap.get(a.name, f"{lab}_{a.name}"), a.role) for a in ks[kind].args]
            names += [n for n, _ in ev if n not in names]
            events.append(ev)
        cases.append(Case(label, (events, names), _derive_roles(events, names)))
    rng = np.random.default_rng(11)
    for i in range(8):
        events, names = _random_events(rng)
        cases.append(Case(f"random group {i + 1}, {len(events)} members over {names}", (events, names), _derive_roles(events, names)))
    return cases


derive_roles = Exercise(
    "06.2", "derive_roles", _roles_cases,
    hint="never written: 'weight' if any member holds it as a weight, else 'input'; written and read "
         "by a LATER member: 'intermediate'; written and never read afterwards: 'output'")

EXERCISES = (group_arguments, derive_roles)
