"""Stitching: several NPU kernels in one function, so one ELF (one xrt run) does a whole group.

    g = stitch("rms_gemv", [Member(norm, {"x": "x", "w": "norm_w", "y": "xn"}, "norm"),
                            Member(proj, {"a": "wq", "x": "xn", "y": "q"}, "q")])
    g.table()            # %argN table of the group; roles derived ("xn" is an intermediate)
    read_plan(g.text)    # two launches, reading and writing the group's arguments

The algorithm works on module text, as the MLIR-AIR Llama guide's stitcher does:
  1. wrap every bare `air.herd` at function level in `air.launch { air.segment { herd } }` (a
     stitched function holds launches only; each becomes one step of the ELF's instruction stream);
  2. take each kernel's function body and rename every SSA value `%v` to `%<label>_v`, every
     symbol it defines (launch/segment/herd names, channels, affine-map aliases) likewise; the
     external kernel symbols (`@matvec_bf16`, ...) stay as they are and are declared once;
  3. rewrite `%argN` through the member's argument map: kernel argument -> group argument. Two
     members naming the same group argument share one DDR buffer: that is how a producer's output
     becomes the next launch's input without the host touching it;
  4. assemble one `func.func` over the group arguments, in order of first use.
  5. optionally (`launches=[[0, 1], [2, 3, 4], ...]`) merge consecutive members' launches into one
     `air.launch { air.segment { herd; herd; ... } }`: fewer launches, so fewer reconfigurations
     of the array inside the one ELF (the xrt.run count is one per ELF either way). The merged segment takes the union of the members' buffers;
     the herds keep their text order, which is the order the emulator runs them in. On the device
     the herds of one segment are placed side by side and run together, so a real build needs the
     producer -> consumer order made explicit (async tokens, or one fused kernel as upstream's
     3-launch o_gemv_ffn does); this emulated form states the order only by position.

The result is a KernelSpec: the module text, the group's argument table with roles derived from the
members' (a buffer written by one launch and read by a later one is an "intermediate"), and a numpy
model that runs the members' models in order on the shared arrays.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from llamanb.errors import LlamanbError
from llamanb.npu.compiler.spec import Arg, KernelSpec
from llamanb.npu.compiler.textir import read_module

_SSA = re.compile(r"%([\w.$-]+)")
_ARG = re.compile(r"arg(\d+)")
_SYMDEF = re.compile(r'sym_name = "([^"]+)"')
_FUNC = re.compile(r"^  func\.func @([\w.$-]+)\((.*)\) \{$")


@dataclass(frozen=True)
class Member:
    """One kernel of a group: its spec, kernel argument -> group argument, and its label."""

    spec: KernelSpec
    argmap: dict = field(default_factory=dict)   # kernel arg name (or index) -> group arg name
    label: str = ""


# ---- text helpers ---------------------------------------------------------------------------
def split_top(s: str) -> list[str]:
    """Split at commas outside <>, (), [] and {} ('memref<4xbf16, 2 : i32>, index' -> 2 parts)."""
    out, depth, cur = [], 0, []
    for ch in s:
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


@dataclass
class _Parts:
    name: str
    arg_types: list[str]
    top: list[str]          # module-level lines other than the function and declarations
    decls: dict             # extern symbol -> declaration line
    body: list[str]         # the function's body lines, `return` excluded


def _parts(text: str) -> _Parts:
    lines = text.rstrip("\n").split("\n")
    if not lines or lines[0].strip() != "module {" or lines[-1].strip() != "}":
        raise LlamanbError("stitch: not a module in llamanb's NPU form (module { ... })")
    top, decls, name, args, body, i = [], {}, None, None, [], 1
    while i < len(lines) - 1:
        line = lines[i]
        m = _FUNC.match(line)
        if m:
            name, args = m.group(1), split_top(m.group(2))
            j = i + 1
            while j < len(lines) and lines[j] != "    return":
                body.append(lines[j])
                j += 1
            if j + 1 >= len(lines) or lines[j + 1] != "  }":
                raise LlamanbError(f"stitch: function @{name} does not end in `return` + `}}`")
            i = j + 2
            continue
        d = re.match(r"^  func\.func private @([\w.$-]+)\(", line)
        if d:
            decls[d.group(1)] = line
        elif line.strip():
            top.append(line)
        i += 1
    if name is None:
        raise LlamanbError("stitch: the module has no public func.func")
    return _Parts(name, [a.split(":", 1)[1].strip() for a in args], top, decls, body)


def _herd_end(body: list[str], start: int) -> int:
    for j in range(start + 1, len(body)):
        if body[j].startswith("    })"):
            return j
    raise LlamanbError(f"stitch: unterminated air.herd on body line {start + 1}")


def wrap_bare_herds(text: str) -> str:
    """The module with each function-level `air.herd` wrapped in launch { segment { herd } }.

    The herd's size operands are constants of the function; a launch is isolated from above, so
    the segment re-creates them. The herd's memref operands pass through the launch and segment
    block arguments; everything inside the herd is untouched (only indented)."""
    p = _parts(text)
    consts = {}
    for line in p.body:
        m = re.match(r'^    %([\w.$-]+) = "arith\.constant"\(\) <\{value = (-?\d+) : index\}>', line)
        if m:
            consts[m.group(1)] = int(m.group(2))
    out, i, n = [], 0, 0
    while i < len(p.body):
        line = p.body[i]
        if not line.startswith('    "air.herd"('):
            out.append(line)
            i += 1
            continue
        end = _herd_end(p.body, i)
        head = re.match(r'^    "air\.herd"\((.*?)\) <\{(.*)\}> \(\{$', line)
        seg = re.search(r"operandSegmentSizes = array<i32: (\d+), (\d+), (\d+)>", line)
        tail = re.match(r"^    \}\)(.*) : \((.*)\) -> \(\)$", p.body[end])
        if not (head and seg and tail):
            raise LlamanbError(f"stitch: cannot read the air.herd on body line {i + 1}")
        n_async, n_size, n_opd = map(int, seg.groups())
        if n_async:
            raise LlamanbError("stitch: a bare herd with async dependencies cannot be wrapped")
        opds, types = split_top(head.group(1)), split_top(tail.group(2))
        sizes = [consts.get(o.lstrip("%")) for o in opds[:n_size]]
        if None in sizes:
            raise LlamanbError("stitch: a bare herd's sizes must be index constants of the function")
        mems, mtypes = opds[n_size:], types[n_size:]
        sym = _SYMDEF.search(head.group(2))
        base = (sym.group(1) if sym else f"herd{n}").removesuffix("_herd")
        w = f"w{n}"
        out.append(f'    %{w}_one = "arith.constant"() <{{value = 1 : index}}> : () -> index')
        largs = ", ".join(f"%{w}_l{k}: {t}" for k, t in enumerate(mtypes))
        out.append(f'    "air.launch"(%{w}_one, %{w}_one, {", ".join(mems)}) <{{operandSegmentSizes'
                   f' = array<i32: 0, 2, {len(mems)}>, sym_name = "{base}_launch"}}> ({{')
        out.append(f"    ^bb0(%{w}_lx: index, %{w}_ly: index, %{w}_lsx: index, %{w}_lsy: index, "
                   f"{largs}):")
        sargs = ", ".join(f"%{w}_s{k}: {t}" for k, t in enumerate(mtypes))
        out.append(f'      "air.segment"({", ".join(f"%{w}_l{k}" for k in range(len(mems)))}) '
                   f'<{{operandSegmentSizes = array<i32: 0, 0, {len(mems)}>, sym_name = '
                   f'"{base}_seg"}}> ({{')
        out.append(f"      ^bb0({sargs}):")
        for k, v in enumerate(sizes):
            out.append(f'        %{w}_size{k} = "arith.constant"() <{{value = {v} : index}}> : '
                       f"() -> index")
        new_opds = [f"%{w}_size{k}" for k in range(n_size)] + \
                   [f"%{w}_s{k}" for k in range(len(mems))]
        out.append(f'        "air.herd"({", ".join(new_opds)}) <{{{head.group(2)}}}> ({{')
        out += ["    " + x for x in p.body[i + 1:end + 1]]
        out.append('        "air.segment_terminator"() : () -> ()')
        out.append(f"      }}) : ({', '.join(mtypes)}) -> ()")
        out.append('      "air.launch_terminator"() : () -> ()')
        out.append(f"    }}) : (index, index, {', '.join(mtypes)}) -> ()")
        i, n = end + 1, n + 1
    return _assemble(p.name, p.arg_types, p.top, list(p.decls.values()), out)


def _assemble(name, arg_types, top, decls, body) -> str:
    sig = ", ".join(f"%arg{i}: {t}" for i, t in enumerate(arg_types))
    return "\n".join(["module {", *top, *decls, f"  func.func @{name}({sig}) {{", *body,
                      "    return", "  }", "}"]) + "\n"


def _rename(lines: list[str], label: str, argmap: dict[int, int], local_syms: set[str],
            aliases: set[str]) -> list[str]:
    """Prefix SSA values and local symbols with `label_`; %argN -> %arg<argmap[N]>."""
    def ssa(m):
        a = _ARG.fullmatch(m.group(1))
        if a:
            return f"%arg{argmap[int(a.group(1))]}"
        return f"%{label}_{m.group(1)}"

    out = []
    for line in lines:
        line = _SSA.sub(ssa, line)
        line = _SYMDEF.sub(lambda m: f'sym_name = "{label}_{m.group(1)}"', line)
        if local_syms:
            line = re.sub(r"@([\w.$-]+)", lambda m: f"@{label}_{m.group(1)}"
                          if m.group(1) in local_syms else m.group(0), line)
        if aliases:
            line = re.sub(r"#([\w.$-]+)", lambda m: f"#{label}_{m.group(1)}"
                          if m.group(1) in aliases else m.group(0), line)
        out.append(line)
    return out


# ---- the group ------------------------------------------------------------------------------
def derive_roles(events: list[list[tuple[str, str]]], names: list[str]) -> dict[str, str]:
    """Roles of the group arguments from the members' roles, in launch order.

    events[i] = [(group arg, member's role), ...] for member i. Never written: "weight" if some
    member holds it as a weight, else "input". Written and read by a later member: "intermediate".
    Written and not read afterwards: "output"."""
    roles = {}
    for g in names:
        written, later_read, weight = False, False, False
        for ev in events:
            for name, role in ev:
                if name != g:
                    continue
                if role in ("output", "intermediate"):
                    written = True
                elif written:
                    later_read = True
                weight |= role == "weight"
        roles[g] = ("intermediate" if later_read else "output") if written else \
            ("weight" if weight else "input")
    return roles


_LAUNCH = re.compile(r'^    "air\.launch"\((.*?)\) <\{(.*)\}> \(\{$')
_SEGMENT = re.compile(r'^      "air\.segment"\((.*?)\) <\{(.*)\}> \(\{$')
_SEGS = re.compile(r"operandSegmentSizes = array<i32: (\d+), (\d+), (\d+)>")


def _block_args(line: str) -> list[tuple[str, str]]:
    inner = line.strip()[len("^bb0("):-2]
    return [(a.split(":", 1)[0].strip(), a.split(":", 1)[1].strip()) for a in split_top(inner)]


def _one_launch(body: list[str], where: str):
    """(lines before, [(value, type)] the segment takes, segment body lines) of a member's body
    holding exactly one launch [1, 1] -> one segment without sizes (else LlamanbError)."""
    starts = [i for i, line in enumerate(body) if _LAUNCH.match(line)]
    if len(starts) != 1:
        raise LlamanbError(f"stitch: {where} has {len(starts)} launches; only a single-launch "
                           f"kernel can share a launch")
    i = starts[0]
    head, segs = _LAUNCH.match(body[i]), _SEGS.search(body[i])
    end = next(j for j in range(i + 1, len(body)) if body[j].startswith("    })"))
    if end != len(body) - 1 or not segs or int(segs.group(1)):
        raise LlamanbError(f"stitch: {where}: ops after its launch or async launch; cannot merge")
    opds = split_top(head.group(1))
    n_size = int(segs.group(2))
    consts = {}
    for line in body[:i]:
        m = re.match(r'^    %([\w.$-]+) = "arith\.constant"\(\) <\{value = (-?\d+) : index\}>', line)
        if m:
            consts["%" + m.group(1)] = int(m.group(2))
    if any(consts.get(o) != 1 for o in opds[:n_size]):
        raise LlamanbError(f"stitch: {where}'s launch iterates more than once; cannot merge")
    largs = _block_args(body[i + 1])[2 * n_size:]
    outer = dict(zip((a for a, _ in largs), zip(opds[n_size:], (t for _, t in largs))))
    inner = body[i + 2:end]
    s_at = [k for k, line in enumerate(inner) if _SEGMENT.match(line)]
    if len(s_at) != 1:
        raise LlamanbError(f"stitch: {where}'s launch holds {len(s_at)} segments; cannot merge")
    k = s_at[0]
    s_end = next(j for j in range(k + 1, len(inner)) if inner[j].startswith("      })"))
    extra = [x for x in inner[:k] + inner[s_end + 1:] if "air.launch_terminator" not in x]
    sseg = _SEGS.search(inner[k])
    if extra or int(sseg.group(1)) or int(sseg.group(2)):
        raise LlamanbError(f"stitch: {where}: its launch holds more than one plain segment")
    sopds = split_top(_SEGMENT.match(inner[k]).group(1))
    sargs = _block_args(inner[k + 1])
    taken = [(a, outer[o]) for (a, _), o in zip(sargs, sopds)]
    seg_body = [x for x in inner[k + 2:s_end] if "air.segment_terminator" not in x]
    return body[:i], taken, seg_body


def _merge(parts: list[tuple[str, list[str]]], lname: str) -> list[str]:
    """One launch [1, 1] -> one segment holding the members' segment bodies in order."""
    pre, values, seg_lines = [], {}, []
    for lab, body in parts:
        before, taken, seg_body = _one_launch(body, lab)
        pre += before
        for _, (v, ty) in taken:
            values.setdefault(v, ty)
        pos = {a: f"%{lname}_s{list(values).index(v)}" for a, (v, _) in taken}
        seg_lines += [_SSA.sub(lambda m: pos.get(m.group(0), m.group(0)), x) for x in seg_body]
    vs, ts = list(values), list(values.values())
    n = len(vs)
    out = pre + [f'    %{lname}_one = "arith.constant"() <{{value = 1 : index}}> : () -> index']
    out.append(f'    "air.launch"(%{lname}_one, %{lname}_one, {", ".join(vs)}) <{{operandSegmentSizes'
               f' = array<i32: 0, 2, {n}>, sym_name = "{lname}_launch"}}> ({{')
    out.append(f"    ^bb0(%{lname}_lx: index, %{lname}_ly: index, %{lname}_lsx: index, "
               f"%{lname}_lsy: index, " + ", ".join(f"%{lname}_l{k}: {t}"
                                                     for k, t in enumerate(ts)) + "):")
    out.append(f'      "air.segment"({", ".join(f"%{lname}_l{k}" for k in range(n))}) '
               f'<{{operandSegmentSizes = array<i32: 0, 0, {n}>, sym_name = "{lname}_seg"}}> ({{')
    out.append("      ^bb0(" + ", ".join(f"%{lname}_s{k}: {t}" for k, t in enumerate(ts)) + "):")
    out += seg_lines
    out.append('        "air.segment_terminator"() : () -> ()')
    out.append(f"      }}) : ({', '.join(ts)}) -> ()")
    out.append('      "air.launch_terminator"() : () -> ()')
    out.append(f"    }}) : (index, index, {', '.join(ts)}) -> ()")
    return out


def _launch_groups(launches, n: int, name: str) -> list[list[int]]:
    if launches is None:
        return [[i] for i in range(n)]
    groups = [list(g) for g in launches]
    if [i for g in groups for i in g] != list(range(n)) or any(not g for g in groups):
        raise LlamanbError(f"stitch {name}: launches={launches!r} must split members 0..{n - 1} "
                           f"into consecutive non-empty runs, in order")
    return groups


def stitch(name: str, members, roles: dict | None = None, launches=None) -> KernelSpec:
    """One KernelSpec whose function runs the members' launches in order (see module doc).

    members: Member(spec, argmap, label) or (spec, argmap[, label]) tuples; an argmap maps kernel
    argument names (or indices) to group argument names; unmapped ones get `<label>_<name>`.
    roles: optional overrides, e.g. {"k": "output"} for an intermediate the host also reads.
    launches: optional runs of member indices, e.g. [[0, 1], [2, 3, 4], [5, 6]]: each run's herds
    share one launch and segment (step 5 of the module doc); default one launch per member."""
    members = [m if isinstance(m, Member) else Member(*m) for m in members]
    if not members:
        raise LlamanbError(f"stitch {name}: no kernels to stitch")
    runs = _launch_groups(launches, len(members), name)
    labels, seen = [], set()
    for k, m in enumerate(members):
        lab = m.label or m.spec.name
        if not re.fullmatch(r"[A-Za-z_][\w]*", lab):
            raise LlamanbError(f"stitch {name}: label {lab!r} is not an identifier")
        if lab in seen:
            raise LlamanbError(f"stitch {name}: two members labelled {lab!r}; give each a label")
        seen.add(lab)
        labels.append(lab)

    group: dict[str, tuple[Arg, str]] = {}        # group arg -> (Arg of first use, memref type)
    events, decls, top, bodies, maps = [], {}, [], [], []
    for m, lab in zip(members, labels):
        spec = m.spec
        known = {a.name for a in spec.args}
        for key in m.argmap:
            if not (isinstance(key, int) and 0 <= key < len(spec.args)) and key not in known:
                raise LlamanbError(f"stitch {name}: {lab} ({spec.name}) has no argument {key!r}; "
                                   f"it has {', '.join(a.name for a in spec.args)}")
        p = _parts(wrap_bare_herds(spec.text))
        if len(p.arg_types) != len(spec.args):
            raise LlamanbError(f"stitch {name}: {spec.name}'s text has {len(p.arg_types)} "
                               f"arguments, its table {len(spec.args)}")
        mapping, ev = {}, []
        for i, (a, ty) in enumerate(zip(spec.args, p.arg_types)):
            g = m.argmap.get(a.name, m.argmap.get(i, f"{lab}_{a.name}"))
            if not isinstance(g, str) or not re.fullmatch(r"[A-Za-z_][\w.]*", g):
                raise LlamanbError(f"stitch {name}: {lab}.{a.name} maps to {g!r}, not a name")
            if g in group and group[g][1] != ty:
                raise LlamanbError(f"stitch {name}: {lab}.{a.name} is {ty} but group argument "
                                   f"{g!r} is already {group[g][1]}")
            if a.name in [x.name for x in spec.args[:i]]:
                raise LlamanbError(f"stitch {name}: {spec.name} repeats argument {a.name}")
            if g not in group:
                group[g] = (Arg(g, a.shape, a.role, f"{lab}.{a.name}: {a.doc}".rstrip(": "),
                                a.dtype), ty)
            mapping[i] = list(group).index(g)
            ev.append((g, a.role))
        if len(set(mapping.values())) != len(mapping):
            raise LlamanbError(f"stitch {name}: {lab} maps two of its arguments to one buffer")
        for sym, line in p.decls.items():
            if sym in decls and decls[sym] != line:
                raise LlamanbError(f"stitch {name}: external kernel @{sym} declared twice with "
                                   f"different types; give one variant another symbol (as the "
                                   f"MLIR-AIR Llama guide's mv_k8192.o does)")
            decls[sym] = line
        local_syms = {s for line in p.top for s in _SYMDEF.findall(line)}
        aliases = {a for line in p.top for a in re.findall(r"^#([\w.$-]+) =", line)}
        top += _rename(p.top, lab, mapping, local_syms, aliases)
        bodies.append((lab, _rename(p.body, lab, mapping, local_syms, aliases)))
        events.append(ev)
        maps.append((lab, spec, [mapping[i] for i in range(len(spec.args))]))

    names = list(group)
    derived = derive_roles(events, names)
    for g, r in (roles or {}).items():
        if g not in group:
            raise LlamanbError(f"stitch {name}: role override for unknown argument {g!r}")
        derived[g] = r
    args = tuple(Arg(g, a.shape, derived[g], a.doc, a.dtype) for g, (a, _) in group.items())
    body = []
    for run in runs:
        if len(run) == 1:
            body += bodies[run[0]][1]
        else:
            body += _merge([bodies[i] for i in run], "_".join(bodies[i][0] for i in run))
    text = _assemble(name, [ty for _, ty in group.values()], top, list(decls.values()), body)

    def model(*arrays):
        for _, spec, idx in maps:
            spec.model(*[arrays[i] for i in idx])

    def uniq(xs):
        return tuple(dict.fromkeys(xs))

    widest = max(members, key=lambda m: m.spec.herd[0] * m.spec.herd[1]).spec
    return KernelSpec(
        name=name, args=args, text=text, model=model, herd=widest.herd,
        tiles={f"{lab}.{k}": v for lab, m in zip(labels, members) for k, v in m.spec.tiles.items()},
        links=uniq(l for m in members for l in m.spec.links),
        externs=uniq(e for m in members for e in m.spec.externs),
        params={"members": tuple((lab, spec.name, tuple(names[i] for i in idx))
                                 for lab, spec, idx in maps),
                "launches": tuple(tuple(r) for r in runs)})


def run_one_by_one(group: KernelSpec, members, arrays, run=None) -> list:
    """Reference: each member run alone (its own module) on the group's arrays, in order."""
    from llamanb.npu.compiler.emulator import run as emulate

    run = run or emulate
    members = [m if isinstance(m, Member) else Member(*m) for m in members]
    index = {a.name: i for i, a in enumerate(group.args)}
    reports = []
    for (lab, _, names), m in zip(group.params["members"], members):
        views = [arrays[index[g]] for g in names]
        reports.append(run(m.spec, *views))
    return reports

