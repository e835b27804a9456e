"""Where llamanb keeps what it builds and converts: $LLAMANB_CACHE, else ~/.cache/llamanb."""
from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    return Path(os.environ.get("LLAMANB_CACHE") or Path.home() / ".cache" / "llamanb")
