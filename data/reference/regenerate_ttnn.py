"""Regenerate (or check) ttnn_blockfloat_vectors.npz with Tenstorrent's ttnn, on the host only.

ttnn publishes wheels for CPython 3.10 and 3.12 only, so this runs in its own venv (no device is
needed: the conversion is ttnn's host packing):

    python3.12 -m venv /tmp/ttnn-venv
    /tmp/ttnn-venv/bin/pip install ttnn==0.81.1 numpy          # ttnn brings its torch
    /tmp/ttnn-venv/bin/python data/reference/regenerate_ttnn.py            # check the file
    /tmp/ttnn-venv/bin/python data/reference/regenerate_ttnn.py --write    # rewrite it

The inputs are the file's own float32 arrays `in_i` (case 6 begins with hand-made edge cases: ties,
signed zero, subnormals, saturation, an all-zero block). Each goes through
`ttnn.from_torch(x, dtype, layout=ttnn.TILE_LAYOUT)` and back with `ttnn.to_torch`
(tenstorrent/tt-metal, ttnn/ttnn/operations/core.py: from_torch's dtype and layout arguments; block
floats need TILE_LAYOUT) for dtype bfloat8_b (`bfp8_b_i`), bfloat4_b (`bfp4_b_i`) and bfloat16
(`bf16_i`). --check compares bit for bit (signed zeros and NaNs included) and exits 1 on any
difference. Nothing here imports llamanb.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
FILE = HERE / "ttnn_blockfloat_vectors.npz"
VERSION = "0.81.1"


def round_trip(x: np.ndarray) -> dict[str, np.ndarray]:
    import torch
    import ttnn

    t = torch.from_numpy(np.ascontiguousarray(x, np.float32))
    out = {}
    for key, dtype in (("bfp8_b", ttnn.bfloat8_b), ("bfp4_b", ttnn.bfloat4_b),
                       ("bf16", ttnn.bfloat16)):
        tt = ttnn.from_torch(t, dtype, layout=ttnn.TILE_LAYOUT)
        out[key] = ttnn.to_torch(tt).to(torch.float32).numpy().reshape(x.shape)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite the shipped file")
    a = ap.parse_args()
    try:
        import ttnn
    except ImportError:
        sys.exit(f"needs ttnn {VERSION} (CPython 3.10 or 3.12 only); see this file's docstring")
    version = getattr(ttnn, "__version__", "unknown")
    if not str(version).startswith(VERSION):
        print(f"warning: ttnn {version}, the file was made with {VERSION}", file=sys.stderr)
    shipped = dict(np.load(FILE))
    n = len([k for k in shipped if k.startswith("in_")])
    fresh, bad = {"ttnn_version": np.array(str(version))}, []
    for i in range(n):
        x = shipped[f"in_{i}"]
        fresh[f"in_{i}"] = x
        for key, y in round_trip(x).items():
            fresh[f"{key}_{i}"] = y
            want = shipped[f"{key}_{i}"]
            if y.shape != want.shape or not np.array_equal(y.view(np.uint32), want.view(np.uint32)):
                diff = np.flatnonzero(y.view(np.uint32) != want.view(np.uint32))
                bad.append(f"case {i} {key}: {diff.size} values differ, first at flat index "
                           f"{diff[0] if diff.size else '?'}")
    if a.write:
        fd, tmp = tempfile.mkstemp(dir=HERE, prefix=".ttnn_vectors.", suffix=".npz")
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **fresh)
        os.replace(tmp, FILE)
        print(f"wrote {FILE}")
        return 0
    for line in bad:
        print(line)
    print(f"{n} cases, {3 * n - len(bad)} of {3 * n} round trips reproduced bit for bit (ttnn {version})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
