"""The reference data ships with the project (data/reference/), so a plain clone stands alone:
the package finds it without anything beside the checkout, and where a developer's machine has
the upstream copy (../shared/reference) the two hold the same bytes."""
import hashlib

import pytest

from conftest import OUTSIDE_REFERENCE, REFERENCE_DIR
from llamanb.check.verify import default_reference
from llamanb.errors import LlamanbError
from llamanb.platform.paths import reference_file

NAMES = ["hf_smollm2_reference.json", "ttnn_blockfloat_vectors.npz"]


def test_default_reference_is_the_shipped_file(monkeypatch):
    monkeypatch.delenv("LLAMANB_REFERENCE", raising=False)
    assert default_reference() == REFERENCE_DIR / "hf_smollm2_reference.json"


def test_a_missing_reference_file_is_one_line():
    with pytest.raises(LlamanbError, match="is missing"):
        reference_file("no_such_reference.json")


@pytest.mark.parametrize("name", NAMES)
def test_shipped_reference_equals_the_outside_copy(name):
    outside = OUTSIDE_REFERENCE / name
    if not outside.is_file():
        pytest.skip(f"no outside copy at {outside} (a reader's clone): the shipped file is the reference")
    digest = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()     # noqa: E731
    assert digest(reference_file(name)) == digest(outside)
