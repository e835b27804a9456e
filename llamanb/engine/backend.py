"""The seam between the engine and whatever computes the transformer.

The engine owns the loop around the model: it turns requests into steps (llamanb.engine.step: rows of
one or more sequences, each row with its position and cache slot), pads them to what the backend
can run, keeps each sequence's length, and takes logits from the rows that need them. A backend
owns the arithmetic:

    embed(ids [R])                       -> x [R, H]      host gather on every backend
    layers(x [R, H], step, cache)        -> x [R, H]      all L blocks; K/V written to the cache
    block(layer, x [R, H], step, cache)  -> x [R, H]      one block (what `layers` loops over)
    head(x [n, H])                       -> logits [n, V] final RMSNorm + LM head

A device backend overrides `layers` to keep the hidden state on its device between blocks. Each
backend also declares the shapes it can run, so the engine (not the cache, not the caller) adapts:

    prefill_lengths       None (any row count) or the lengths it was compiled for: the engine pads
                          a prompt with EOS rows to the smallest that fits and splits a longer one
                          into chunks that read the earlier chunks from the cache
    row_multiple          every multi-row step is padded to a multiple of this many rows
    row_align             a sequence whose rows must not depend on its neighbours in the step
                          starts at a row that is a multiple of this (padding rows in between)
    kv_dtype              the dtype its KV cache stores
    kv_position_multiple  its attention reads keys in whole tiles of this many positions
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from llamanb.engine.kv.base import KVStore
from llamanb.engine.step import Step
from llamanb.model.weights import Weights


class Backend(ABC):
    name: str = "?"
    emulated: bool = False          # True when a device is simulated on the CPU: say so in output
    description: str = ""
    prefill_lengths: tuple[int, ...] | None = None
    row_multiple: int = 1
    row_align: int = 1
    kv_dtype = np.float32
    kv_position_multiple: int = 1
    # prefill attention runs in blocks of this many query rows (llamanb.engine.attention): prompt chunks
    # that are a multiple of it keep chunked prefill bit-identical to one shot; 1 = no blocks
    query_tile: int = 1

    def __init__(self, weights: Weights):
        self.weights = weights
        self.config = weights.config

    def embed(self, ids: np.ndarray) -> np.ndarray:
        """Token embedding lookup: ids [R] -> [R, H]. A host-side gather on every backend."""
        return np.asarray(self.weights.embed[ids], dtype=np.float32)

    def layers(self, x: np.ndarray, step: Step, cache: KVStore, collect: list | None = None) -> np.ndarray:
        """Every block on x [R, H]; appends each block's output to `collect` if given."""
        for layer in range(self.config.n_layers):
            x = self.block(layer, x, step, cache)                     # [R, H]
            if collect is not None:
                collect.append(x)
        return x

    @abstractmethod
    def block(self, layer: int, x: np.ndarray, step: Step, cache: KVStore) -> np.ndarray:
        """One transformer block on x [R, H] (rows as in `step`). Writes this layer's K/V of
        every non-padding row into the cache; attention reads each row's own sequence only."""

    @abstractmethod
    def head(self, x: np.ndarray) -> np.ndarray:
        """Final RMSNorm + LM head: x [n, H] -> logits [n, V] (float32)."""
