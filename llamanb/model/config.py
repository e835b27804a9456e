"""LlamaConfig: the handful of numbers that define a Llama model, and what they cost.

Accounting (parameters, bytes, KV cache) is closed-form from the config, so the course can talk
about Llama 3 70B without ever loading it.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass, field

from llamanb.errors import LlamanbError

# Bytes one weight takes in each storage format.
#   bfp8 / bfp4: Tenstorrent block floats (bfloat8_b / bfloat4_b): 16 values share one 8-bit exponent,
#                each value keeps sign + 7 (or 3) mantissa bits -> (8 + 8/16) / 8 and (4 + 8/16) / 8.
#   int4:        bare 4-bit integers (scales not counted);  q8_0 / q4_1: GGUF blocks of 32 with scales.
BYTES_PER_PARAM = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "bfp8": 1.0 + 1.0 / 16,
    "bfp4": 0.5 + 1.0 / 16,
    "int4": 0.5,
    "q8_0": 34 / 32,
    "q4_1": 20 / 32,
}


@dataclass(frozen=True)
class RopeScaling:
    """Llama 3's frequency-dependent RoPE scaling (HF `rope_type: llama3`)."""

    factor: float = 32.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


@dataclass(frozen=True)
class LlamaConfig:
    name: str
    n_layers: int          # L
    hidden: int            # H
    n_heads: int           # N_h
    n_kv_heads: int        # N_kv
    head_dim: int          # d_h
    ffn: int               # D_ff
    vocab: int             # V
    rope_theta: float
    max_seq: int           # context length the model was trained for
    rms_eps: float = 1e-5
    tie_embeddings: bool = True
    rope_scaling: RopeScaling | None = None
    bos_id: int | None = None
    eos_ids: tuple[int, ...] = field(default_factory=tuple)

    def __post_init__(self):
        for k in ("n_layers", "hidden", "n_heads", "n_kv_heads", "head_dim", "ffn", "vocab", "max_seq"):
            v = getattr(self, k)
            if not _is_int(v) or v <= 0:
                raise LlamanbError(f"config: {k} must be a positive integer, got {v!r}")
        for k in ("rope_theta", "rms_eps"):
            v = getattr(self, k)
            if not _is_number(v) or v < 0 or (k == "rope_theta" and v == 0):
                raise LlamanbError(f"config: {k} must be a finite number "
                                   f"{'> 0' if k == 'rope_theta' else '>= 0'}, got {v!r}")
        if self.n_heads % self.n_kv_heads:
            raise LlamanbError(
                f"config: n_heads ({self.n_heads}) is not a multiple of n_kv_heads ({self.n_kv_heads})")
        if self.head_dim % 2:
            raise LlamanbError(f"config: head_dim must be even for RoPE, got {self.head_dim}")

    # ---- derived symbols -------------------------------------------------------------------
    @property
    def group(self) -> int:
        """G: query heads that share one K/V head."""
        return self.n_heads // self.n_kv_heads

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    def replace(self, **changes) -> "LlamaConfig":
        return dataclasses.replace(self, **changes)

    # ---- parameter accounting ----------------------------------------------------------------
    def param_breakdown(self) -> dict[str, int]:
        """Parameters per component, whole model (layers summed)."""
        H, L = self.hidden, self.n_layers
        parts = {
            "embedding": self.vocab * H,
            "attn_norm": L * H,
            "q_proj": L * H * self.q_dim,
            "k_proj": L * H * self.kv_dim,
            "v_proj": L * H * self.kv_dim,
            "o_proj": L * self.q_dim * H,
            "ffn_norm": L * H,
            "gate_proj": L * H * self.ffn,
            "up_proj": L * H * self.ffn,
            "down_proj": L * self.ffn * H,
            "final_norm": H,
            "lm_head": 0 if self.tie_embeddings else self.vocab * H,
        }
        return parts

    def layer_params(self) -> int:
        per = self.param_breakdown()
        layer_keys = ("attn_norm", "q_proj", "k_proj", "v_proj", "o_proj", "ffn_norm",
                      "gate_proj", "up_proj", "down_proj")
        return sum(per[k] for k in layer_keys) // self.n_layers

    def n_params(self) -> int:
        return sum(self.param_breakdown().values())

    def weight_bytes(self, fmt: str = "bf16") -> float:
        return self.n_params() * bytes_per_param(fmt)

    # ---- KV cache accounting -----------------------------------------------------------------
    def kv_bytes_per_token(self, fmt: str = "bf16") -> float:
        """K and V, every layer, one position: 2 * L * N_kv * d_h values."""
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * bytes_per_param(fmt)

    def kv_bytes(self, seq_len: int, fmt: str = "bf16", batch: int = 1) -> float:
        return self.kv_bytes_per_token(fmt) * seq_len * batch

    # ---- HF config.json round trip -----------------------------------------------------------
    @classmethod
    def from_hf(cls, cfg: dict, name: str = "hf") -> "LlamaConfig":
        """Read an HF config.json (as a dict). Every value is checked for its type and range
        first, so a malformed file is one LlamanbError that names the field, not a traceback."""
        if not isinstance(cfg, dict):
            raise LlamanbError(f"config.json must hold a JSON object, got {type(cfg).__name__}")
        _refuse_unimplemented(cfg)
        hidden = _hf_int(cfg, "hidden_size")
        n_heads = _hf_int(cfg, "num_attention_heads")
        n_kv = _hf_int(cfg, "num_key_value_heads", default=n_heads)
        head_dim = _hf_int(cfg, "head_dim", default=None)
        if head_dim is None:
            if hidden % n_heads:
                raise LlamanbError(f"config.json: hidden_size ({hidden}) is not a multiple of "
                                   f"num_attention_heads ({n_heads}) and head_dim is not given")
            head_dim = hidden // n_heads
        scaling = None
        rs = cfg.get("rope_scaling") or cfg.get("rope_parameters")
        theta = _hf_float(cfg, "rope_theta", default=None, minimum=0, strict=True)
        if rs is not None and not isinstance(rs, dict):
            raise LlamanbError(f"config.json: rope_scaling must be an object or null, got {rs!r:.40}")
        if rs:
            theta = _hf_float(rs, "rope_theta", default=theta, minimum=0, strict=True,
                              where="rope_scaling.")
            _refuse_partial_rotary(rs, "rope_scaling.")
            kind = rs.get("rope_type", rs.get("type", "default"))
            if kind == "llama3":
                scaling = RopeScaling(
                    factor=_hf_float(rs, "factor", minimum=0, strict=True, where="rope_scaling."),
                    low_freq_factor=_hf_float(rs, "low_freq_factor", minimum=0, strict=True,
                                              where="rope_scaling."),
                    high_freq_factor=_hf_float(rs, "high_freq_factor", minimum=0, strict=True,
                                               where="rope_scaling."),
                    original_max_position_embeddings=_hf_int(
                        rs, "original_max_position_embeddings", where="rope_scaling."))
                if scaling.high_freq_factor == scaling.low_freq_factor:
                    raise LlamanbError("config.json: rope_scaling.high_freq_factor equals "
                                       "low_freq_factor (llama3 scaling divides by their difference)")
            elif kind not in ("default", None):
                raise LlamanbError(f"config: rope_type {kind!r} is not supported (default or llama3)")
        vocab = _hf_int(cfg, "vocab_size")
        eos = cfg.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, list) else ((eos,) if eos is not None else ())
        bos = cfg.get("bos_token_id")
        for what, ids in (("eos_token_id", eos_ids), ("bos_token_id", () if bos is None else (bos,))):
            for t in ids:
                if not _is_int(t) or not 0 <= t < vocab:
                    raise LlamanbError(f"config.json: {what} must be a token id in [0, {vocab}) "
                                       f"(or a list of them), got {t!r}")
        tie = cfg.get("tie_word_embeddings", False)
        if not isinstance(tie, bool):
            raise LlamanbError(f"config.json: tie_word_embeddings must be true or false, got {tie!r}")
        return cls(
            name=name,
            n_layers=_hf_int(cfg, "num_hidden_layers"),
            hidden=hidden,
            n_heads=n_heads,
            n_kv_heads=n_kv,
            head_dim=head_dim,
            ffn=_hf_int(cfg, "intermediate_size"),
            vocab=vocab,
            rope_theta=10000.0 if theta is None else theta,
            max_seq=_hf_int(cfg, "max_position_embeddings", default=2048),
            rms_eps=_hf_float(cfg, "rms_norm_eps", default=1e-6, minimum=0),
            tie_embeddings=tie,
            rope_scaling=scaling,
            bos_id=bos,
            eos_ids=tuple(int(e) for e in eos_ids),
        )

    def to_hf(self) -> dict:
        """A config.json that transformers' LlamaForCausalLM reads back to the same model."""
        cfg = {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": self.hidden,
            "intermediate_size": self.ffn,
            "num_hidden_layers": self.n_layers,
            "num_attention_heads": self.n_heads,
            "num_key_value_heads": self.n_kv_heads,
            "head_dim": self.head_dim,
            "vocab_size": self.vocab,
            "max_position_embeddings": self.max_seq,
            "rms_norm_eps": self.rms_eps,
            "rope_theta": self.rope_theta,
            "tie_word_embeddings": self.tie_embeddings,
            "hidden_act": "silu",
            "attention_bias": False,
            "mlp_bias": False,
            "torch_dtype": "float32",
            "bos_token_id": self.bos_id,
            "eos_token_id": list(self.eos_ids) if len(self.eos_ids) != 1 else self.eos_ids[0],
        }
        if self.rope_scaling is not None:
            rs = self.rope_scaling
            cfg["rope_scaling"] = {
                "rope_type": "llama3", "factor": rs.factor, "low_freq_factor": rs.low_freq_factor,
                "high_freq_factor": rs.high_freq_factor,
                "original_max_position_embeddings": rs.original_max_position_embeddings}
        return cfg


# config.json fields of a transformers Llama that change what is computed, with the value that
# llamanb's math implements (transformers' LlamaConfig defaults; its modeling_llama.py reads them:
# attention_bias -> q/k/v/o_proj bias, mlp_bias -> gate/up/down_proj bias, hidden_act -> the
# gate's activation). A checkpoint that sets another value is refused, naming the field, rather
# than run with the term left out (a Llama with attention_bias ran with its biases dropped:
# cosine -0.07 to transformers at the last layer). Fields that do not change inference
# (attention_dropout, initializer_range, pretraining_tp -- a tensor-parallel split of the same
# products --, use_cache, torch_dtype) are not checked.
_IMPLEMENTED = {"attention_bias": (False,), "mlp_bias": (False,),
                "hidden_act": ("silu", "swish")}


def _refuse_unimplemented(cfg: dict) -> None:
    for key, ok in _IMPLEMENTED.items():
        v = cfg.get(key)
        if v is not None and v not in ok:
            raise LlamanbError(f"config.json: {key} is {v!r:.40}; llamanb implements only "
                               f"{' or '.join(map(repr, ok))} (refused rather than computed "
                               "without it)")
    _refuse_partial_rotary(cfg, "")


def _refuse_partial_rotary(d: dict, where: str) -> None:
    """transformers' rope init (modeling_rope_utils.py) rotates int(head_dim * factor) dims."""
    v = d.get("partial_rotary_factor")
    if v is not None and v != 1:
        raise LlamanbError(f"config.json: {where}partial_rotary_factor is {v!r:.40}; llamanb "
                           "rotates the whole head (1.0) only")


def check_fits_memory(cfg: "LlamaConfig", where: str) -> None:
    """Refuse, from the config's numbers alone (closed form, nothing allocated), a model whose
    float32 weights cannot fit in this machine's memory and swap: converting it would fill the
    disk and running it would swap forever (a GGUF with block_count 10**9 hung with growing
    memory before any message)."""
    import os

    need = cfg.weight_bytes("fp32")
    try:
        room = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return
    room += _swap_bytes()
    if need > room:
        raise LlamanbError(f"{where}: the config describes {cfg.n_params():,} parameters "
                           f"({cfg.n_layers:,} layers of hidden size {cfg.hidden:,}), "
                           f"{human_bytes(need)} in float32; this machine has "
                           f"{human_bytes(room)} of memory and swap")


def _swap_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("SwapTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


_REQUIRED = object()


def _hf_int(cfg: dict, key: str, default=_REQUIRED, where: str = "") -> int | None:
    """A positive integer field of config.json (JSON null counts as absent). 2.0 is read as 2."""
    v = cfg.get(key)
    if v is None:
        if default is _REQUIRED:
            raise LlamanbError(f"config.json lacks {where}{key!r}: not a Llama config"
                               if key not in cfg else f"config.json: {where}{key} is null; "
                               f"expected a positive integer")
        return default
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if not _is_int(v):
        raise LlamanbError(f"config.json: {where}{key} must be a positive integer, got {v!r:.40}")
    if v < 1:
        raise LlamanbError(f"config.json: {where}{key} must be a positive integer, got {v}")
    return int(v)


def _hf_float(cfg: dict, key: str, default=_REQUIRED, minimum: float = 0, strict: bool = False,
              where: str = "") -> float | None:
    """A finite number >= minimum (> minimum when strict) from config.json."""
    v = cfg.get(key)
    if v is None:
        if default is _REQUIRED:
            raise LlamanbError(f"config.json lacks {where}{key!r}: not a Llama config")
        return default
    bound = f"{'>' if strict else '>='} {minimum:g}"
    if not _is_number(v) or v < minimum or (strict and v == minimum):
        raise LlamanbError(f"config.json: {where}{key} must be a finite number {bound}, got {v!r:.40}")
    return float(v)


def bytes_per_param(fmt: str) -> float:
    try:
        return BYTES_PER_PARAM[fmt]
    except KeyError:
        raise LlamanbError(f"unknown format {fmt!r}; known: {', '.join(BYTES_PER_PARAM)}") from None


# ---- presets: the published configs ------------------------------------------------------------
SMOLLM2_135M = LlamaConfig(
    name="SmolLM2-135M-Instruct", n_layers=30, hidden=576, n_heads=9, n_kv_heads=3, head_dim=64,
    ffn=1536, vocab=49152, rope_theta=1e5, max_seq=8192, rms_eps=1e-5, tie_embeddings=True,
    bos_id=1, eos_ids=(2,))

LLAMA32_1B = LlamaConfig(
    name="Llama-3.2-1B", n_layers=16, hidden=2048, n_heads=32, n_kv_heads=8, head_dim=64,
    ffn=8192, vocab=128256, rope_theta=5e5, max_seq=131072, rms_eps=1e-5, tie_embeddings=True,
    rope_scaling=RopeScaling(32.0, 1.0, 4.0, 8192), bos_id=128000, eos_ids=(128001, 128008, 128009))

LLAMA3_70B = LlamaConfig(
    name="Llama-3-70B", n_layers=80, hidden=8192, n_heads=64, n_kv_heads=8, head_dim=128,
    ffn=28672, vocab=128256, rope_theta=5e5, max_seq=8192, rms_eps=1e-5, tie_embeddings=False,
    bos_id=128000, eos_ids=(128001, 128009))

LLAMA31_8B = LlamaConfig(       # meta-llama/Llama-3.1-8B config.json
    name="Llama-3.1-8B", n_layers=32, hidden=4096, n_heads=32, n_kv_heads=8, head_dim=128,
    ffn=14336, vocab=128256, rope_theta=5e5, max_seq=131072, rms_eps=1e-5, tie_embeddings=False,
    rope_scaling=RopeScaling(8.0, 1.0, 4.0, 8192), bos_id=128000, eos_ids=(128001,))

PRESETS = {"smollm2-135m": SMOLLM2_135M, "llama3.2-1b": LLAMA32_1B, "llama3-70b": LLAMA3_70B,
           "llama3.1-8b": LLAMA31_8B}


def human_bytes(n: float) -> str:
    if n <= 0:
        return "0 B"
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    i = min(int(math.log(n, 1024)), len(units) - 1)
    return f"{n / 1024 ** i:.2f} {units[i]}"
