"""Host <-> device bytes of the NPU2 backend, in closed form from the model config.

The backend (llamanb.npu.backend) moves, per call, exactly the arguments its index sets say:
inputs every call, outputs read back, weights and intermediates once per buffer set. After the
first call of each set (the steady state), a prefill of S rows and a decode token move:

  host broker (every hand-off between ELFs goes through the host)
    prefill, per layer   to device    x, lut_q, lut_k (rms_gemms_rope); q, k, v (flash_attn);
                                      attn, x (o_ffn)
                         from device  q, k, v; attn; out
    decode, per layer    to device    x, lut_q, lut_k; attn, x
                         from device  q, k, v; out
    LM head, per row     to device    xn [H] (normed on the host)   from device  logits [V]
  aliasing within a layer (what the backend's `aliasing=True` runs: prefill q/k/v and the
  attention output stay in shared buffers): to device x, lut_q, lut_k; x -- from device k, v (for
  the host KV cache); out
  chained layers (`chain_layers=True`, formula only -- the backend does not run it): as above, and
  each layer's o_ffn output is also the next layer's input (both its rms_gemms_rope x and its
  o_ffn residual), so x crosses for layer 0 only and out for the last layer only. The two together
  are the MLIR-AIR guide's "D2. Cross-ELF BO aliasing" (docs/detail/IMPLEMENTATION_GUIDE.html, Part
  D: Q, attn_out and "o_ffn output -> next layer's rms_gemms_rope's x_in" fully aliased, K and V
  partly; its estimate "~640 MB / pass to ~150 MB / pass").

`static_luts=True` counts the RoPE tables as written once (as upstream does for a fixed prompt
length at positions 0..S-1); the backend itself passes them every call, because a chunk of a long
prompt starts elsewhere. All values are bf16 (2 bytes). tests/npu/test_npu_backend.py checks these
formulas against the bytes the emulated device counts.
"""
from __future__ import annotations

from llamanb.model.config import LlamaConfig

BF16 = 2


def prefill_bytes(cfg: LlamaConfig, S: int, aliasing: bool = False,
                  static_luts: bool = False, chain_layers: bool = False) -> dict:
    """{"to_device", "from_device"} bytes of one steady-state prefill of S rows (+ one head row).
    chain_layers (implies aliasing) also aliases each layer's output into the next layer."""
    H, qd, kvd, L = cfg.hidden, cfg.q_dim, cfg.kv_dim, cfg.n_layers
    luts = 0 if static_luts else S * (qd + kvd)
    if chain_layers:
        to = L * luts + 2 * S * H                    # x into layer 0's two ELFs only
        back = L * S * 2 * kvd + S * H               # K, V per layer; the last layer's out
        return {"to_device": BF16 * (to + H), "from_device": BF16 * (back + cfg.vocab)}
    if aliasing:
        to = S * H + luts + S * H
        back = S * 2 * kvd + S * H
    else:
        to = (S * H + luts) + S * (qd + 2 * kvd) + (S * qd + S * H)
        back = S * (qd + 2 * kvd) + S * qd + S * H
    return {"to_device": BF16 * (L * to + H), "from_device": BF16 * (L * back + cfg.vocab)}


def decode_bytes(cfg: LlamaConfig) -> dict:
    """{"to_device", "from_device"} bytes of one steady-state decode token."""
    H, qd, kvd, L = cfg.hidden, cfg.q_dim, cfg.kv_dim, cfg.n_layers
    to = (H + qd + kvd) + (qd + H)
    back = (qd + 2 * kvd) + H
    return {"to_device": BF16 * (L * to + H), "from_device": BF16 * (L * back + cfg.vocab)}


def weight_bytes(cfg: LlamaConfig, phase: str = "both") -> int:
    """Bytes preloaded once into the per-layer buffers (bf16): decode and/or prefill layouts, each
    holding every layer's projections and norms, plus the LM head."""
    H, F, qd, kvd, L = cfg.hidden, cfg.ffn, cfg.q_dim, cfg.kv_dim, cfg.n_layers
    layer = H * (qd + 2 * kvd) + qd * H + 3 * H * F + 2 * H
    layouts = {"both": 2, "prefill": 1, "decode": 1}[phase]
    return BF16 * (layouts * L * layer + cfg.vocab * H + H)
