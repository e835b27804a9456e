"""The course machinery: jupytext pairs, their consistency check, and building executed notebooks.

    notebooks/NN_name.py     py:percent, the file you edit
    notebooks/NN_name.ipynb  generated from it, executed, committed with outputs

A chapter split off after chapter NN takes a letter, NNb_name, and sorts right after it.

`check` converts both files of each pair to cells and compares them; it never writes (unlike
`jupytext --sync`, which on a fresh clone picks a direction from file times and may overwrite the
wrong file). When a pair drifted it says which side is newer -- the side whose cells changed since
the last commit (git), else the one modified later -- and advises only a command that keeps it:
`make notebooks NB=...` when the .py is newer, `jupytext --to py:percent ...` when the .ipynb is
(an edit saved from Jupyter without pairing). `build` regenerates the .ipynb from the .py, executes it in the notebook's own folder
(where nbval runs it too), drops widget state and timing metadata, and writes it atomically.

    python -m llamanb.course.notebooks check [DIR]           exit 1 and a diff if any pair drifted
    python -m llamanb.course.notebooks build [FILE.py ...]   regenerate + execute (default: every pair)
    python -m llamanb.course.notebooks solutions [FILE.py ...]   run notebooks with the exercises solved
    python -m llamanb.course map [--markdown | --write-readme | --check-readme]   the course map (llamanb.course.chapters)

`solutions` runs a notebook as a student's completed copy would run: every exercise cell (a code
cell whose function still raises NotImplementedError) is replaced by that function from
solutions/NN_name.py, the notebook is executed in memory in its own folder, and every checker line
must say "passed". Nothing is written: the committed notebooks keep their unsolved stubs.

Needs the `notebooks` extra (jupytext, nbclient, ipykernel).
"""
from __future__ import annotations

import ast
import difflib
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from llamanb.errors import LlamanbError

NOTEBOOK_DIR = Path(__file__).resolve().parents[2] / "notebooks"
# NN_name, or NNx_name for a chapter split off after NN (01b_prefill_flops follows 01_llama_math_numpy)
NAME = re.compile(r"^(\d\d[a-z]?|A)_[a-z0-9_]+$")        # NN_name, NNb_name, or A_name (the appendix)
# (cell type, source): what a reader sees and runs; outputs and metadata are not compared.
Cell = tuple[str, str]


def _jupytext():
    try:
        import jupytext
        import nbformat
    except ImportError:
        raise LlamanbError("jupytext is not installed: run `make test` once (it installs the "
                           "notebook extras) or `pip install -e '.[notebooks]'`") from None
    return jupytext, nbformat


def pairs(directory: Path = NOTEBOOK_DIR) -> list[tuple[Path, Path]]:
    """(NN_name.py, NN_name.ipynb) for every course notebook in `directory`, sorted by name."""
    stems = {p.stem for p in directory.glob("*.py")} | {p.stem for p in directory.glob("*.ipynb")}
    return [(directory / f"{s}.py", directory / f"{s}.ipynb") for s in sorted(stems) if NAME.match(s)]


def cells(nb) -> list[Cell]:
    return [(c.cell_type, c.source.rstrip()) for c in nb.cells]


def _render(cs: list[Cell]) -> list[str]:
    out = []
    for i, (kind, src) in enumerate(cs):
        out.append(f"--- cell {i} [{kind}]\n")
        out.extend(line + "\n" for line in src.splitlines())
    return out


def _committed_cells(path: Path, read) -> list[Cell] | None:
    """The cells of `path` as of git's HEAD, or None (no git, not a repository, not committed)."""
    try:
        out = subprocess.run(["git", "show", f"HEAD:./{path.name}"], cwd=path.parent,
                             capture_output=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    try:
        return cells(read(out.stdout.decode("utf-8")))
    except Exception:                       # a committed file that does not parse: no evidence
        return None


def newer_side(py: Path, ipynb: Path, from_py: list[Cell], from_nb: list[Cell]) -> tuple[str | None, str]:
    """Which file of a drifted pair holds the newer cells: ("py" | "ipynb" | None, why).

    First the content: the side whose cells differ from its committed version was edited (git).
    If both or neither did, the file modified later (more than a second apart) is taken as newer.
    Otherwise None: nothing tells, and the reader must choose."""
    jupytext, nbformat = _jupytext()
    was_py = _committed_cells(py, lambda text: jupytext.reads(text, fmt="py:percent"))
    was_nb = _committed_cells(ipynb, lambda text: nbformat.reads(text, as_version=4))
    note = ""
    if was_py is not None and was_nb is not None:
        edited = [side for side, now, was in (("py", from_py, was_py), ("ipynb", from_nb, was_nb))
                  if now != was]
        if len(edited) == 1:
            return edited[0], "its cells changed since the last commit, the other side's did not"
        note = "both sides changed since the last commit; " if edited else ""
    dt = py.stat().st_mtime - ipynb.stat().st_mtime
    if abs(dt) > 1.0:
        side = "py" if dt > 0 else "ipynb"
        return side, f"{note}it was modified {abs(dt):.0f} s after the other"
    return None, f"{note}both were modified within a second of each other"


def _shown(path: Path) -> str:
    """A path as the reader would type it: relative to the working directory when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def advice(py: Path, ipynb: Path, side: str | None, why: str) -> str:
    """What to run for a drifted pair: only commands that keep the newer side."""
    to_nb = f"make notebooks NB={_shown(py)}"
    to_py = f"jupytext --to py:percent {_shown(ipynb)}"
    if side == "py":
        return (f"the .py is newer ({why}): regenerate and execute the .ipynb from it with "
                f"`{to_nb}`")
    if side == "ipynb":
        return (f"the .ipynb is newer ({why}; an edit saved from Jupyter without pairing?): carry "
                f"its cells into the .py with `{to_py}`, then execute with `{to_nb}`")
    return (f"cannot tell which side is newer ({why}): read the diff below, then keep the .py's cells "
            f"with `{to_nb}` or the .ipynb's with `{to_py}` -- each overwrites the other file")


def pair_problems(py: Path, ipynb: Path) -> list[str]:
    """Empty when both files hold the same cells; otherwise one message (with a diff) per problem."""
    jupytext, nbformat = _jupytext()
    if not py.exists():
        return [f"{ipynb.name}: no {py.name} beside it (the .py is the source: create it with "
                f"`jupytext --to py:percent {_shown(ipynb)}`)"]
    if not ipynb.exists():
        return [f"{py.name}: no {ipynb.name} generated from it (run `make notebooks NB={_shown(py)}`)"]
    from_py = cells(jupytext.read(py, fmt="py:percent"))
    from_nb = cells(nbformat.read(ipynb, as_version=4))
    if from_py == from_nb:
        return []
    diff = "".join(difflib.unified_diff(_render(from_py), _render(from_nb), str(py.name), str(ipynb.name)))
    side, why = newer_side(py, ipynb, from_py, from_nb)
    return [f"{py.name} and {ipynb.name} hold different cells; {advice(py, ipynb, side, why)}\n{diff}"]


def check(directory: Path = NOTEBOOK_DIR) -> list[str]:
    found = pairs(directory)
    if not found:
        return [f"no NN_name.py / NN_name.ipynb notebooks in {directory}"]
    return [msg for py, nb in found for msg in pair_problems(py, nb)]


def _strip(nb) -> None:
    """Keep the committed file stable and offline-clean: no widget state, no per-cell timings,
    no emptied progress displays (llamanb.platform.progress: present only when a step ran long), cell ids
    that do not change from one build to the next."""
    from llamanb.platform.progress import is_leftover

    nb.metadata.pop("widgets", None)
    for i, c in enumerate(nb.cells):
        c.metadata.pop("execution", None)
        if c.cell_type == "code":
            c.outputs = [o for o in c.outputs if not is_leftover(o)]
        c.id = f"cell-{i:03d}"              # jupytext draws random ids; keep rebuilds diff-free


def _execute(nb, py: Path, timeout: int) -> float:
    """Execute `nb` in py's folder (where nbval runs it too); returns the seconds it took."""
    from nbclient import NotebookClient

    nb.metadata.setdefault("kernelspec", {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                          "language": "python"})
    # store_widget_state=True: nbclient needs the widget state machinery to route output captured by
    # Output widgets (ipywidgets.interact); _strip drops the state before the file is written.
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                            store_widget_state=True, resources={"metadata": {"path": str(py.parent)}})
    t0 = time.perf_counter()
    client.execute()
    return time.perf_counter() - t0


def build(py: Path, timeout: int = 600) -> float:
    """Regenerate py's .ipynb, execute it, write it atomically. Returns the execution seconds."""
    jupytext, nbformat = _jupytext()
    py = Path(py).resolve()
    nb = jupytext.read(py, fmt="py:percent")
    seconds = _execute(nb, py, timeout)
    _strip(nb)
    target = py.with_suffix(".ipynb")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            nbformat.write(nb, f)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)           # mkstemp creates 0600; a notebook is a normal file
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return seconds


# ---- exercises: running a notebook as a completed student copy ----------------------------------
SOLUTIONS_DIR = NOTEBOOK_DIR.parent / "solutions"
STUB = "raise NotImplementedError"
VERDICT = re.compile(r"^(\d\d[a-z]?|A)\.\d+ \w+: (passed|FAILED|not attempted)")
VERDICT_PASSED = re.compile(r"^(\d\d[a-z]?|A)\.\d+ \w+: passed")


def solution_file(py: Path) -> Path:
    return SOLUTIONS_DIR / Path(py).name


def stub_functions(source: str) -> list[str]:
    """Names of the functions a cell defines whose body still raises NotImplementedError."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any(
                isinstance(n, ast.Raise) and "NotImplementedError" in ast.unparse(n) for n in ast.walk(node)):
            names.append(node.name)
    return names


def solved_cells(cells_src: list[tuple[str, str]], solution_source: str, where: str = "") -> list[tuple[str, str]]:
    """The (cell type, source) list with every exercise stub replaced by the solution's function of
    the same name, preceded by the solution file's imports (as a student's own cell would hold them)."""
    tree = ast.parse(solution_source)
    funcs = {n.name: ast.get_source_segment(solution_source, n) for n in tree.body
             if isinstance(n, ast.FunctionDef)}
    imports = [ast.get_source_segment(solution_source, n) for n in tree.body
               if isinstance(n, (ast.Import, ast.ImportFrom))]
    out = []
    for kind, src in cells_src:
        names = stub_functions(src) if kind == "code" and STUB in src else []
        if names:
            missing = [n for n in names if n not in funcs]
            if missing:
                raise LlamanbError(f"{where}: no solution for {', '.join(missing)}")
            src = "\n".join(imports + [""] + [funcs[n] + "\n" for n in names]).strip() + "\n"
        out.append((kind, src))
    return out


def run_with_solutions(py: Path, timeout: int = 600) -> tuple[float, list[str]]:
    """Execute py's notebook with its exercises solved (in memory, in the notebook's folder).
    Returns (seconds, the checker lines it printed)."""
    jupytext, nbformat = _jupytext()
    py = Path(py).resolve()
    sol = solution_file(py)
    if not sol.exists():
        raise LlamanbError(f"{py.name}: no solutions file {sol}")
    nb = jupytext.read(py, fmt="py:percent")
    new = solved_cells(cells(nb), sol.read_text(encoding="utf-8"), py.name)
    stubs = sum(1 for (_, a), (_, b) in zip(cells(nb), new) if a != b)
    if not stubs:
        raise LlamanbError(f"{py.name}: no exercise cells (functions raising NotImplementedError)")
    for c, (_, src) in zip(nb.cells, new):
        c.source = src
    seconds = _execute(nb, py, timeout)
    verdicts = []
    for c in nb.cells:
        for o in c.get("outputs", []):
            if o.get("output_type") == "stream":
                verdicts += [line for line in o.get("text", "").splitlines() if VERDICT.match(line)]
    return seconds, verdicts


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd = argv.pop(0) if argv else "check"
    try:
        if cmd == "check":
            directory = Path(argv[0]) if argv else NOTEBOOK_DIR
            problems = check(directory)
            for msg in problems:
                print(msg, file=sys.stderr)
            if not problems:
                print(f"{len(pairs(directory))} notebook pairs hold the same cells")
            return 1 if problems else 0
        if cmd == "build":
            targets = [Path(a) for a in argv] or [py for py, _ in pairs()]
            for py in targets:
                if py.suffix != ".py" or not py.exists():
                    raise LlamanbError(f"not a notebook source: {py}")
            for py in targets:
                seconds = build(py)
                print(f"{py.name:32s} executed in {seconds:5.1f} s", flush=True)
            return 0
        if cmd == "solutions":
            targets = [Path(a) for a in argv] or [py for py, _ in pairs() if solution_file(py).exists()]
            for py in targets:
                if py.suffix != ".py" or not py.exists():
                    raise LlamanbError(f"not a notebook source: {py}")
            failed = 0
            for py in targets:
                seconds, verdicts = run_with_solutions(py)
                bad = [v for v in verdicts if not VERDICT_PASSED.match(v)]
                failed += len(bad) + (not verdicts)
                print(f"{py.stem:32s} {len(verdicts) - len(bad)}/{len(verdicts)} exercises pass with "
                      f"the solutions filled in (executed in {seconds:5.1f} s)", flush=True)
                for v in bad:
                    print(f"    {v}", flush=True)
            return 1 if failed else 0
        raise LlamanbError(f"unknown command {cmd!r} (use check, build, solutions or map)")
    except LlamanbError as e:
        print(f"llamanb.course.notebooks: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:            # a failing cell: nbclient's message names the cell
        first = str(e).strip().splitlines()
        print(f"llamanb.course.notebooks: error: {type(e).__name__}: {first[-1] if first else ''}", file=sys.stderr)
        if os.environ.get("LLAMANB_DEBUG"):
            raise
        print(str(e)[-3000:], file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
