"""The package's layering, checked from the source: a backend computes, it does not find models
or probe machines; the package imports without any optional (hardware, MLIR, torch) package."""
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


def test_backends_do_not_import_the_store_or_the_benchmark():
    for f in (PKG / "backends").glob("*.py"):
        bad = {m for m in _imports(f) if m.startswith(("llamanb.io", "llamanb.bench", "llamanb.check"))}
        assert not bad, f"{f.name} imports {sorted(bad)}"


def test_kv_stores_and_step_stand_alone():
    for f in [*(PKG / "kv").glob("*.py"), PKG / "step.py", PKG / "ops.py", PKG / "numerics.py"]:
        bad = {m for m in _imports(f) if m.startswith(("llamanb.io", "llamanb.bench", "llamanb.backends",
                                                        "llamanb.engine"))}
        assert not bad, f"{f.name} imports {sorted(bad)}"


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
