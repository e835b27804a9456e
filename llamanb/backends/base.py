"""The seam between the engine and whatever computes a transformer block.

The engine owns the loop (embedding, L blocks, KV-cache bookkeeping, final norm + LM head on the
rows that matter). A backend owns the arithmetic of one block and of the head. The numpy reference
implements it directly; the NPU and Tenstorrent backends of later chapters implement the same two
calls with their kernels, so generation, verification and benchmarks run unchanged on all of them.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from ..kv_cache import KVCache
from ..weights import Weights


class Backend(ABC):
    name: str = "?"
    emulated: bool = False          # True when a device is simulated on the CPU: say so in output
    description: str = ""
    prefill_row_multiple: int = 1   # the engine pads prefill rows (after the real tokens) to a multiple

    def __init__(self, weights: Weights):
        self.weights = weights
        self.config = weights.config

    @abstractmethod
    def block(self, layer: int, x: np.ndarray, start: int, cache: KVCache) -> np.ndarray:
        """One transformer block on x [S, H] holding positions start .. start+S-1.
        Writes this layer's K/V for those positions into the cache; returns [S, H]."""

    @abstractmethod
    def head(self, x: np.ndarray) -> np.ndarray:
        """Final RMSNorm + LM head: x [n, H] -> logits [n, V] (float32)."""

    def embed(self, ids: np.ndarray) -> np.ndarray:
        """Token embedding lookup: ids [S] -> [S, H]. A host-side gather on every backend."""
        return np.asarray(self.weights.embed[ids], dtype=np.float32)
