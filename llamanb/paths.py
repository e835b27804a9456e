"""Where llamanb keeps what it builds and converts: $LLAMANB_CACHE, else ~/.cache/llamanb."""
from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    return Path(os.environ.get("LLAMANB_CACHE") or Path.home() / ".cache" / "llamanb")


# Outputs of independent systems (HF transformers' greedy tokens and top-5 logits, ttnn's
# block-float round trips) that the course and its tests check against. They ship inside the
# project (data/reference/, with the scripts that regenerate them), so a plain clone stands alone.
REFERENCE_DIR = Path(__file__).resolve().parents[1] / "data" / "reference"


def reference_file(name: str) -> Path:
    """data/reference/NAME of this checkout; a one-line LlamanbError if it is not there."""
    from .errors import LlamanbError

    path = REFERENCE_DIR / name
    if not path.is_file():
        raise LlamanbError(f"reference data {path} is missing (it ships with the repository: "
                           "restore it with `git checkout -- data/reference`)")
    return path
