"""The package's layering, checked from the source: rooms on floors, nothing imports upward, the
tracks share one shape; the package imports without any optional (hardware, MLIR, torch) package."""
import ast
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "llamanb"


def _imports(path: Path) -> set[str]:
    """Absolute module names a file imports (relative imports resolved against the package)."""
    mod = ".".join(path.relative_to(PKG.parent).with_suffix("").parts)
    pkg = mod.rsplit(".", 1)[0] if path.name != "__init__.py" else mod[: -len(".__init__")]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = pkg.split(".")
            if node.level:
                base = base[: len(base) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module
            out.add(name)
            out |= {f"{name}.{a.name}" for a in node.names}
    return out


# The rooms of the package, lowest first: a module may import its own room and rooms below it,
# never one above (docs/architecture.md). The tracks stand side by side on one floor and never
# import each other.
FLOORS = [
    {"errors"},
    {"platform"},
    {"model"},
    {"io"},
    {"engine"},
    {"serve"},
    {"cpu", "cuda", "npu", "tcp", "mesh"},
    {"readiness", "check"},
    {"bench", "course", "engine_choice"},
    {"chat_cli", "cli", "_moved", "__init__", "__main__"},
]
TRACKS = FLOORS[6]
FLOOR = {room: i for i, rooms in enumerate(FLOORS) for room in rooms}


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _files():
    for f in sorted(PKG.rglob("*.py")):
        rel = f.relative_to(PKG)
        yield f, (rel.parts[0] if len(rel.parts) > 1 else rel.stem)


def test_every_module_sits_in_a_known_room():
    assert {room for _, room in _files()} <= set(FLOOR), "a new room needs its floor in FLOORS"


def test_no_module_imports_a_room_above_its_own():
    bad = []
    for f, room in _files():
        for m in _imports(f):
            if m.startswith("llamanb.") or m == "llamanb":
                other = _room(m)
                if other in FLOOR and FLOOR[other] > FLOOR[room] and room != "__init__":
                    bad.append(f"{f.relative_to(PKG)} imports {m}")
                if room in TRACKS and other in TRACKS and other != room:
                    bad.append(f"{f.relative_to(PKG)} (track {room}) imports track {other}: {m}")
    assert not bad, "\n".join(bad)


def test_tracks_have_the_same_rooms():
    """Every track holds a backend and a readiness check; its tests sit in tests/<track>/."""
    for track in sorted(TRACKS):
        have = {f.stem for f in (PKG / track).glob("*.py")}
        assert {"__init__", "backend", "readiness"} <= have, f"{track}: {sorted(have)}"
        assert list((PKG.parent / "tests" / track).glob("test_*.py")), f"tests/{track}/ is empty"


def test_nothing_uses_an_old_import_path():
    """llamanb._moved keeps the old paths working for readers' own code; the project uses the new ones."""
    from llamanb import _moved

    old = {"llamanb." + k for k in _moved.MOVED} | {"llamanb." + k for k in _moved.SPLIT}
    roots = [PKG, PKG.parent / "tests", PKG.parent / "notebooks", PKG.parent / "solutions",
             PKG.parent / "scripts"]
    bad = []
    for root in roots:
        for f in sorted(root.rglob("*.py")):
            if f.name == "_moved.py":
                continue
            for m in _imports(f) if root == PKG else _imports_outside(f):
                if m in old:
                    bad.append(f"{f.relative_to(PKG.parent)}: {m}")
    assert not bad, "\n".join(bad)


def _imports_outside(path: Path) -> set[str]:
    out = set()
    try:
        tree = ast.parse(path.read_text())
    except SyntaxError:
        return out
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def test_old_import_paths_still_work():
    code = ("import warnings; warnings.simplefilter('error')\n"
            "import llamanb\n"
            "try:\n"
            "    import llamanb.config\n"
            "except DeprecationWarning as e:\n"
            "    print(e)\n"
            "warnings.simplefilter('ignore')\n"
            "from llamanb.config import LlamaConfig\n"
            "from llamanb.model.config import LlamaConfig as New\n"
            "from llamanb.hardware import npu2_missing, has_module\n"
            "from llamanb.backends.cpu import CpuBackend\n"
            "import llamanb.npu.perf.cost as c, sys\n"
            "assert LlamaConfig is New and c is sys.modules['llamanb.npu.cost']\n"
            "assert npu2_missing.__module__ == 'llamanb.npu.readiness'\n"
            "assert CpuBackend.__module__ == 'llamanb.cpu.backend'\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PKG.parent)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == "llamanb.config moved to llamanb.model.config; import it from there"


def test_import_without_optional_packages():
    """`import llamanb` and its subpackages load with torch, transformers and every hardware
    stack blocked."""
    code = ("import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] in {'torch', 'transformers', 'ttnn', 'pyxrt', 'air', 'mlir',"
            " 'matplotlib', 'ipywidgets'}:\n"
            "            raise ImportError('blocked ' + name)\n"
            "sys.meta_path.insert(0, Block())\n"
            "import importlib, pkgutil, llamanb\n"
            "for m in pkgutil.walk_packages(llamanb.__path__, 'llamanb.'):\n"
            "    if m.name.split('.')[1] not in ('course', '__main__'):\n"
            "        importlib.import_module(m.name)\n"
            "print('ok')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PKG.parent)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr[-2000:]
