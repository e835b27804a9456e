"""The NPU2 backend on the engine seam: `npu2-emulated` (everywhere) and `npu2` (real: mlir-air,
pyxrt and an NPU bound to amdxdna).

    prefill (a step of the compiled length, one sequence from position 0), per layer:
        rms_gemms_rope -> q, k, v read back; K/V written to the host KV cache
        flash_attn     -> attention output read back               (host broker: q/k/v go back in)
        o_ffn          -> the next layer's x
    decode (one row), per layer:
        rms_gemv_rope  -> q, k, v; K/V to the cache; attention over the cache on the host
        o_gemv_ffn     -> the next layer's x
    head: the final RMSNorm on the host, then lm_head_gemv (the vocabulary in row slices), once
    per logit row.

So a prefill is 3L+1 NPU calls and a decode token 2L+1 (counted by the device, not typed here).
Weights are rounded to bf16 once and laid out as the kernels want them (GEMV weights [out, in]
K-major as HF stores them, GEMM weights [in, out]), then preloaded into one buffer set per layer
(bo_key "<group>.L<i>"), before anything is timed. Static slots are written once; the RoPE tables
are weights by role but change with the positions, so they are passed as inputs every call -- the
raw index sets are built here from the roles minus those tables.

Emulated, each call runs by default the stitched group's numpy semantics (execute="model",
the members' numpy models in launch order, ~10x faster); execute="text" interprets the module
text op by op (llamanb.npu.compiler.emulator). Buffers, syncs, calls and bytes are the same either way.

A step the compiled prefill cannot run (rows of several sequences, or a chunk that starts after
position 0) computes its attention on the host over the cache, and says so in `host_attention`.
The stitched groups come from llamanb.npu.compiler.groups; every call goes through llamanb.npu.runtime.kernel_cache.
"""
from __future__ import annotations

import numpy as np

from llamanb.engine.attention import BLOCK_Q, KEY_TILE, attention
from llamanb.engine.backend import Backend
from llamanb.errors import LlamanbError
from llamanb.engine.kv.base import KVStore
from llamanb.model.numerics import to_bf16
from llamanb.model.rope import rope_for
from llamanb.engine.step import PAD, Step
from llamanb.model.weights import Weights



def lm_parts_for(vocab: int, want: int = 8, tiles: int = 8) -> int:
    """The most row slices (<= want) that split the vocabulary evenly over a GEMV herd."""
    for p in range(want, 0, -1):
        if vocab % p == 0 and (vocab // p) % tiles == 0:
            return p
    raise LlamanbError(f"the vocabulary ({vocab}) does not split over a GEMV herd of {tiles} tiles")


def have_real_npu() -> tuple[bool, str]:
    """(True, "") when mlir-air, pyxrt and an amdxdna device are present, else (False, what is
    missing) -- the same check `python -m llamanb info` and chapter 13 report."""
    from llamanb.npu.readiness import npu2_missing

    missing = npu2_missing()
    return (not missing), "; ".join(missing)


class _Attn:
    """Host attention as the numpy reference computes it in its bf16 mode (llamanb.engine.attention,
    probabilities rounded to bf16, prefill in BLOCK_Q query-row blocks)."""

    def __init__(self, cfg):
        self.config, self.scale = cfg, np.float32(cfg.head_dim ** -0.5)

    def __call__(self, q, cache, layer, slot, start):
        return attention(q, lambda T: cache.keys(layer, slot, T),
                         lambda T: cache.values(layer, slot, T), start, self.scale,
                         self.config.n_kv_heads, rnd=to_bf16, block_q=BLOCK_Q)


class NPU2Backend(Backend):
    name = "npu2-emulated"
    emulated = True
    dtype = "bf16"                  # weights and activations in bfloat16, float32 accumulation
    kv_dtype = np.float32
    row_multiple = 1
    kv_position_multiple = KEY_TILE
    query_tile = BLOCK_Q             # a chunk's host attention is llamanb.engine.attention's blocks

    def __init__(self, weights: Weights, seq: int = 128, execute: str = "model",
                 device=None, cache_root=None, lm_parts: int | None = None, real: bool = False,
                 aliasing: bool = False):
        from llamanb.npu.compiler.groups import decode_groups, prefill_groups
        from llamanb.npu.runtime.kernel_cache import KernelCache
        from llamanb.npu.runtime.devices import EmulatedDevice, XrtDevice

        if real:
            ok, why = have_real_npu()
            if not ok:
                raise LlamanbError(f"backend npu2: missing {why}; use --backend npu2-emulated")
            device = device or XrtDevice()
        self.device = device if device is not None else EmulatedDevice(execute=execute)
        self.emulated = bool(self.device.emulated)
        self.name = "npu2-emulated" if self.emulated else "npu2"
        how = ("the groups' numpy semantics" if getattr(self.device, "execute", "") == "model"
               else "their MLIR text interpreted")
        self.description = (f"emulated NPU2 (stitched MLIR-AIR groups run as {how}; NPU times "
                            f"are cost-model estimates)" if self.emulated else
                            "AMD NPU2 through XRT")
        super().__init__(weights)
        c = self.config
        if not isinstance(seq, int) or seq < 1:
            raise ValueError(f"seq must be a positive integer, got {seq!r}")
        self.seq = seq
        self.prefill_lengths = (seq,)
        self.freqs = rope_for(c)
        self.attn = _Attn(c)
        self.host_attention = 0            # prefill layers whose attention ran on the host
        parts = lm_parts if lm_parts is not None else lm_parts_for(c.vocab)
        # decode runs the 8-launch o_gemv_ffn; the 3-launch o_gemv_ffn3 is built, not run here
        self.groups = {**prefill_groups(c, seq), **{n: g for n, g in decode_groups(c, parts).items()
                                                    if n != "o_gemv_ffn3"}}
        self.parts = parts
        self.kc = KernelCache(self.device, root=cache_root)
        for name, g in self.groups.items():
            self.kc.compile_and_cache(name, g.spec, {"seq": seq} if g.phase == "prefill" else {})
        self._sets = {name: self._index_sets(g.spec) for name, g in self.groups.items()}
        self._zeros: dict = {}
        self.aliasing = bool(aliasing)
        self._alias_outputs: dict = {}
        self._preload()
        if self.aliasing:
            self._bind_aliases()

    # ------------------------------------------------------------ layout and preload
    @staticmethod
    def _index_sets(spec):
        lut = {i for i, a in enumerate(spec.args) if a.name.startswith("lut")}
        return dict(static_input_indices=frozenset(spec.static_indices) - lut,
                    intermediate_indices=frozenset(spec.intermediate_indices),
                    output_indices=frozenset(spec.output_indices))

    def _layer_weights(self, i: int) -> dict:
        c, w = self.config, self.weights.layers[i]
        qd, kvd, F = c.q_dim, c.kv_dim, c.ffn
        wq, wk, wv = w.wqkv[:qd], w.wqkv[qd:qd + kvd], w.wqkv[qd + kvd:]
        gate, up = w.w_gate_up[:F], w.w_gate_up[F:]
        return {   # decode: GEMV weights [out, in]; prefill: GEMM weights [in, out]
            "rms_gemv_rope": {"attn_norm": w.attn_norm, "wq": wq, "wk": wk, "wv": wv},
            "o_gemv_ffn": {"wo": w.wo, "ffn_norm": w.ffn_norm, "w_gate": gate, "w_up": up,
                           "w_down": w.w_down},
            "rms_gemms_rope": {"attn_norm": w.attn_norm, "wq_t": wq.T, "wk_t": wk.T,
                               "wv_t": wv.T},
            "o_ffn": {"wo_t": w.wo.T, "ffn_norm": w.ffn_norm, "w_gate_t": gate.T,
                      "w_up_t": up.T, "w_down_t": w.w_down.T},
        }

    def _preload(self) -> None:
        """Every layer's weights, rounded to bf16, into that layer's buffers (before timing)."""
        for i in range(self.config.n_layers):
            for gname, named in self._layer_weights(i).items():
                spec = self.groups[gname].spec
                self.kc.preload(gname, {spec.arg_index(k): np.ascontiguousarray(to_bf16(v))
                                        for k, v in named.items()}, bo_key=f"{gname}.L{i}")
        spec = self.groups["lm_head_gemv"].spec
        V, n = self.config.vocab, self.config.vocab // self.parts
        head = {}
        for p in range(self.parts):
            head[spec.arg_index(f"w_head{p}")] = np.ascontiguousarray(
                to_bf16(self.weights.lm_head[p * n:(p + 1) * n]))
        assert n * self.parts == V
        self.kc.preload("lm_head_gemv", head, bo_key="lm_head_gemv")

    def _bind_aliases(self) -> None:
        """Prefill with buffer aliasing: flash_attn reads q, k, v from rms_gemms_rope's buffers
        and o_ffn reads the attention output from flash_attn's, per layer; only K and V (for the
        cache) and the block output come back to the host."""
        first, fa, second = (self.groups[n].spec for n in ("rms_gemms_rope", "flash_attn",
                                                             "o_ffn"))
        for i in range(self.config.n_layers):
            for nm in ("q", "k", "v"):
                self.kc.alias("flash_attn", f"flash_attn.L{i}", fa.arg_index(nm),
                              "rms_gemms_rope", f"rms_gemms_rope.L{i}", first.arg_index(nm))
            self.kc.alias("o_ffn", f"o_ffn.L{i}", second.arg_index("attn"),
                          "flash_attn", f"flash_attn.L{i}", fa.arg_index("out"))
        self._alias_outputs = {
            "rms_gemms_rope": {first.arg_index("k"), first.arg_index("v")},
            "flash_attn": set()}

    # ------------------------------------------------------------ one call
    def _call(self, gname: str, layer, feed: dict, aliased: bool = False) -> dict:
        spec = self.groups[gname].spec
        sets = self._sets[gname]
        if aliased and gname in self._alias_outputs:
            sets = {**sets, "output_indices": frozenset(self._alias_outputs[gname])}
        zeros = self._zeros.get(gname)
        if zeros is None:                  # one read-only zero array per slot, reused every call
            zeros = self._zeros[gname] = [np.zeros(a.shape, np.float32) for a in spec.args]
            for z in zeros:
                z.flags.writeable = False
        arrays = []
        for i, a in enumerate(spec.args):
            if a.name in feed:
                arrays.append(np.ascontiguousarray(feed[a.name], dtype=np.float32).reshape(a.shape))
            elif i in sets["static_input_indices"]:
                arrays.append(None)                    # preloaded
            else:
                arrays.append(zeros[i])
        key = gname if layer is None else f"{gname}.L{layer}"
        out = self.kc.load_and_run(gname, None, *arrays, bo_key=key, **sets)
        return {spec.args[i].name: out[i] for i in sets["output_indices"]}

    def _luts(self, positions):
        from llamanb.npu.compiler.builders import rope_lut
        c = self.config
        return (rope_lut(positions, c.n_heads, self.freqs), rope_lut(positions, c.n_kv_heads,
                                                                     self.freqs))

    # ------------------------------------------------------------ the seam
    def embed(self, ids: np.ndarray) -> np.ndarray:
        return to_bf16(super().embed(ids))

    def layers(self, x, step: Step, cache: KVStore, collect=None):
        R = x.shape[0]
        if R == 1:
            luts = self._luts(step.positions[:1])
            return self._decode_layers(x, step, cache, collect, luts)
        if R != self.seq:
            raise LlamanbError(f"{self.name}: a multi-row step must have the compiled length "
                               f"{self.seq} rows, got {R}")
        luts = self._luts(np.maximum(step.positions, 0))
        for layer in range(self.config.n_layers):
            x = self._prefill_block(layer, x, step, cache, luts)
            if collect is not None:
                collect.append(x)
        return x

    def block(self, layer: int, x, step: Step, cache: KVStore):
        if x.shape[0] == 1:
            return self._decode_block(layer, x, step, cache, self._luts(step.positions[:1]))
        return self._prefill_block(layer, x, step, cache, self._luts(np.maximum(step.positions, 0)))

    def _decode_layers(self, x, step, cache, collect, luts):
        for layer in range(self.config.n_layers):
            x = self._decode_block(layer, x, step, cache, luts)
            if collect is not None:
                collect.append(x)
        return x

    def _decode_block(self, layer, x, step, cache, luts):
        c = self.config
        seg = step.segments[0]
        o = self._call("rms_gemv_rope", layer, {"x": x[0], "lut_q": luts[0][0],
                                                "lut_k": luts[1][0]})
        k = o["k"].reshape(1, c.n_kv_heads, c.head_dim)
        v = o["v"].reshape(1, c.n_kv_heads, c.head_dim)
        cache.write(layer, seg.slot, seg.start, k, v)
        attn = to_bf16(self.attn(o["q"].reshape(1, c.n_heads, c.head_dim), cache, layer,
                                 seg.slot, seg.start))                        # host, [1, Nh d]
        out = self._call("o_gemv_ffn", layer, {"x": x[0], "attn": attn[0]})
        return out["out"].reshape(1, c.hidden)

    def _prefill_block(self, layer, x, step, cache, luts):
        c = self.config
        R, Nh, Nkv, d = x.shape[0], c.n_heads, c.n_kv_heads, c.head_dim
        feed = {"x": x.reshape(-1), "lut_q": luts[0], "lut_k": luts[1]}
        segs = step.segments
        if len(segs) == 1 and segs[0].start == 0 and segs[0].row == 0:
            seg = segs[0]
            if self.aliasing:              # q/k/v and the attention output stay on the device
                o = self._call("rms_gemms_rope", layer, feed, aliased=True)
                k, v = o["k"].reshape(R, Nkv, d), o["v"].reshape(R, Nkv, d)
                cache.write(layer, seg.slot, 0, k[:seg.n], v[:seg.n])
                self._call("flash_attn", layer, {}, aliased=True)
                out = self._call("o_ffn", layer, {"x": x.reshape(-1)}, aliased=True)["out"]
                return out.reshape(R, c.hidden)
            o = self._call("rms_gemms_rope", layer, feed)
            q, k, v = o["q"].reshape(R, Nh, d), o["k"].reshape(R, Nkv, d), o["v"].reshape(R, Nkv, d)
            cache.write(layer, seg.slot, 0, k[:seg.n], v[:seg.n])
            attn = self._call("flash_attn", layer, {"q": o["q"], "k": o["k"], "v": o["v"]})["out"]
        else:                                   # several sequences or a later chunk: host
            o = self._call("rms_gemms_rope", layer, feed)
            q, k, v = o["q"].reshape(R, Nh, d), o["k"].reshape(R, Nkv, d), o["v"].reshape(R, Nkv, d)
            self.host_attention += 1
            attn = np.zeros((R, Nh * d), np.float32)
            for seg in segs:
                r = seg.rows
                cache.write(layer, seg.slot, seg.start, k[r], v[r])
                attn[r] = self.attn(q[r], cache, layer, seg.slot, seg.start)
            attn = to_bf16(attn)
            if self.aliasing:                   # the attn slot is flash_attn's BO: fill it
                from llamanb.npu.runtime.devices import TO_DEVICE, write
                bo = self.kc.buffers("o_ffn", f"o_ffn.L{layer}")[
                    self.groups["o_ffn"].spec.arg_index("attn")]
                write(bo, attn, self.device.counters)
                bo.sync(TO_DEVICE)
        out = self._call("o_ffn", layer, {"attn": attn, "x": x.reshape(-1)})["out"]
        return out.reshape(R, c.hidden)

    def head(self, x: np.ndarray) -> np.ndarray:
        """The final RMSNorm on the host (as the MLIR-AIR guide does), then lm_head_gemv."""
        from llamanb.model.ops import rms_norm

        rows = []
        xn = to_bf16(rms_norm(np.asarray(x, np.float32), self.weights.final_norm,
                              self.config.rms_eps))
        for r in xn:
            o = self._call("lm_head_gemv", None, {"xn": r})
            rows.append(np.concatenate([o[f"logits{p}"] for p in range(self.parts)]))
        return np.stack(rows)

    @property
    def counters(self):
        return self.device.counters


class NPU2RealBackend(NPU2Backend):
    name = "npu2"
    emulated = False

    def __init__(self, weights: Weights, seq: int = 128, **kw):
        super().__init__(weights, seq=seq, real=True, **kw)
