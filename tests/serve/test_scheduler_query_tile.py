"""The scheduler's chunk rule comes from the backend's attention query tile (Backend.query_tile),
not from a constant of one backend: chunks must be a multiple of the tile they are given, and the
backends that run llamanb.engine.attention's blocks report its BLOCK_Q."""
from __future__ import annotations

import pytest

from llamanb.engine.attention import BLOCK_Q
from llamanb.engine.backend import Backend
from llamanb.engine.numpy_backend import NumpyBackend
from llamanb.model.config import SMOLLM2_135M as CFG
from llamanb.errors import LlamanbError
from llamanb.engine.kv.paged import PagedKVCache
from llamanb.npu.backend import NPU2Backend
from llamanb.serve.scheduler import Scheduler


def test_chunk_is_checked_against_the_given_query_tile():
    cache = PagedKVCache(CFG, 512, n_blocks=64, block=16, slots=2)
    Scheduler(cache, token_budget=256, chunk=64, query_tile=64)          # 64 | 64: accepted
    Scheduler(cache, token_budget=256, chunk=BLOCK_Q)                    # the default tile
    with pytest.raises(LlamanbError, match="multiple of 64"):
        Scheduler(cache, token_budget=256, chunk=100, query_tile=64)
    with pytest.raises(LlamanbError, match=f"multiple of {BLOCK_Q}"):
        Scheduler(cache, token_budget=256, chunk=64)                     # 64 is not a multiple of 128


def test_backends_report_their_query_tile():
    assert Backend.query_tile == 1                     # no blocks unless a backend says so
    assert NPU2Backend.query_tile == BLOCK_Q           # its host attention is llamanb.engine.attention's
    from llamanb import load_model
    assert NumpyBackend(load_model().weights).query_tile == BLOCK_Q
