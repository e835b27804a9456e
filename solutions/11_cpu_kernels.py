"""Solutions to the exercises of notebook 11 (the CPU's kernels)."""


def weight_bytes(cfg, fmt):
    """Bytes of matrix weights one decode step streams.
    Why: every projection multiplies the step's row, so each of its weights is read once per
    step; the embedding is a lookup (one row), except as the tied LM head, which is read whole."""
    per_layer = (cfg.q_dim * cfg.hidden + 2 * cfg.kv_dim * cfg.hidden + cfg.hidden * cfg.q_dim
                 + 3 * cfg.ffn * cfg.hidden)
    n = cfg.n_layers * per_layer + cfg.vocab * cfg.hidden
    per = {"float32": 4.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_1": 20 / 32}[fmt]
    return n * per


def tile_registers(mr, npan):
    """Vector registers of an mr x npan register tile during one k step.
    Why: the tile keeps 2 accumulators (one panel is two vectors wide) for each row and panel for
    the whole of K, loads the panels' k-th row (2 vectors each) and broadcasts one x[i, k]."""
    return 2 * mr * npan + 2 * npan + 1
