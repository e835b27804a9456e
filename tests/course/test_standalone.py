"""A clone stands alone: nothing the course or the package runs reads a `shared/` folder beside
the checkout (the reference data ships in data/reference/, with the scripts that regenerate it)."""
from __future__ import annotations

import re

from conftest import REPO_ROOT

# a path into ../shared, however it is spelled: "../shared", Path(..) / "shared", "shared/reference"
OUTSIDE = re.compile(r"""\.\./shared|/\s*["']shared["']|["']shared/|parent\s*/\s*["']shared""")


def test_nothing_in_the_package_or_notebooks_reads_a_shared_folder():
    files = sorted((REPO_ROOT / "llamanb").rglob("*.py")) + sorted((REPO_ROOT / "notebooks").glob("*.py")) \
        + sorted((REPO_ROOT / "notebooks").glob("*.ipynb"))
    assert len(files) > 50
    hits = [f"{p.relative_to(REPO_ROOT)}:{n}: {line.strip()}"
            for p in files for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if OUTSIDE.search(line)]
    assert hits == [], "\n".join(hits)
    assert OUTSIDE.search('Path("..").resolve().parent / "shared" / "reference"')   # it would see one


def test_reference_data_and_its_regeneration_scripts_ship():
    from llamanb.check.verify import default_reference
    from llamanb.platform.paths import REFERENCE_DIR

    assert REFERENCE_DIR == REPO_ROOT / "data" / "reference"
    assert default_reference().parent == REFERENCE_DIR
    for name in ("hf_smollm2_reference.json", "ttnn_blockfloat_vectors.npz", "regenerate_hf.py",
                 "regenerate_ttnn.py"):
        assert (REFERENCE_DIR / name).is_file(), name
    for script in ("regenerate_hf.py", "regenerate_ttnn.py"):       # neither uses llamanb
        assert "import llamanb" not in (REFERENCE_DIR / script).read_text()
        assert "from llamanb" not in (REFERENCE_DIR / script).read_text()
