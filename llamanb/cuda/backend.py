"""The cuda backends: a Llama block as llamanb.cuda.kernels launches, on an NVIDIA GPU (`cuda`) or
in numba-cuda's simulator (`cuda-simulated`, every CUDA thread a Python thread: tiny models only).

    x [R, H] on the device --rmsnorm--> --qkv gemm--> --rope (q, k)--> --fill_kv (new rows of
    every segment into kt [slots, N_kv, d, S] / v [slots, N_kv, S, d])--> --qkt--> --softmax_rows
    --> --softmax_v--> --wo gemm, += x--> --rmsnorm--> --gate|up gemm--> --silu_mul--> --down
    gemm, += x-->

The hidden state stays on the device for all L blocks of a step (`layers`); one step's metadata
goes up once: each row's slot and key count (`row_len`, min_llm_inference's `lengths`: position
+ 1, 0 for a padding row), cos/sin of its position, and each segment's slot/first row/start/
length (what upstream's `new_batch_idx` names). Prefill, decode and a mixed continuous-batching
step are the same launches; a decode row is a segment of one.

The device caches mirror the engine's KVStore: the backend keeps one pair per store it is handed
(the engine's store stays the record of lengths and slots) and writes each step's new K/V rows
into the store too (`write_host_cache`), so that any other reader of the store -- a paged store's
blocks, a test, another backend -- sees them. A slot whose store holds positions this backend
never wrote (filled by another backend, or freed and refilled since) has them uploaded before its
step. How the backend tells: per slot and position it keeps a seal, a hash of the store's
last-layer K row as the store held it right after this backend's step wrote (or uploaded) that
position. A step continuing a slot at `start` trusts the device copy only if the device holds
`start` positions and the store's row `start - 1` still bears its seal; the last layer's key
depends on every earlier token, so a different sequence in the slot shows there (the first layer's
would not: it depends on the token and position only). A count alone cannot tell: a slot freed
and refilled by another backend can hold fewer, as many or more positions than before.

Projections: `gemm="kernel"` is the course's tiled `gemm_nt`; `"cublas"` is cuBLAS through CuPy
(a GPU with CuPy installed); `"host"` is numpy on the host, for the simulator only, where a
projection through `gemm_nt` costs seconds (gemm_nt itself is tested in the simulator on its
own). `"auto"`: cublas when CuPy imports on a GPU, else kernel; host under the simulator.
"""
from __future__ import annotations

import contextlib
import sys
import weakref

import numpy as np

from llamanb.engine.backend import Backend
from llamanb.errors import LlamanbError
from llamanb.engine.kv.base import KVStore
from llamanb.model.rope import cos_sin, rope_for
from llamanb.engine.step import Step
from llamanb.model.weights import Weights
from llamanb.cuda import launch
from llamanb.cuda import runtime

GRID_Y_MAX = 65535       # CUDA's gridDim.y limit; qkt and softmax_v put (row, head) on y
SIM_MAX_HIDDEN = 256     # the simulator runs a step of a 135M model in hours: refuse it


@contextlib.contextmanager
def simulator_pace(simulated: bool):
    """Under the simulator, a block's threads pass barriers by a polling manager thread; with
    Python's default 5 ms GIL switch interval each barrier waits for switches. A 0.1 ms interval
    runs the same kernels about 9x faster (scripts/gpu_check.py's dry-run gemm check, quiet 2-core
    EPYC: 13.1 s at 5 ms, 2.6 s at 0.5 ms, 1.4 s at 0.1 ms; 0.02 ms gains no more); restored on
    exit."""
    if not simulated:
        yield
        return
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


class _Mirror:
    """The device caches for one KVStore: kt [L][slots, N_kv, d, S], v [L][slots, N_kv, S, d],
    and per slot how many leading positions the device holds."""

    def __init__(self, cuda, cache: KVStore, n_layers: int):
        s, nkv, d, S = cache.slots, cache.n_kv_heads, cache.head_dim, cache.max_seq
        self.store = weakref.ref(cache)
        self.kt = [cuda.to_device(np.zeros((s, nkv, d, S), np.float32)) for _ in range(n_layers)]
        self.v = [cuda.to_device(np.zeros((s, nkv, S, d), np.float32)) for _ in range(n_layers)]
        self.valid = np.zeros(s, dtype=np.int64)
        self.seal = np.zeros((s, S), dtype=np.int64)    # see the module docstring
        self.shape = (s, nkv, d, S)

    def sealed(self, cache: KVStore, slot: int, pos: int) -> bool:
        return self.seal[slot, pos] == _seal(cache, slot, pos)

    def reseal(self, cache: KVStore, slot: int, lo: int, hi: int) -> None:
        if hi > lo:
            rows = cache.keys(cache.n_layers - 1, slot, hi)[:, lo:hi]          # [N_kv, n, d]
            self.seal[slot, lo:hi] = [_row_hash(rows[:, i]) for i in range(hi - lo)]


def _row_hash(row: np.ndarray) -> int:
    return hash(np.ascontiguousarray(row, dtype=np.float32).tobytes())


def _seal(cache: KVStore, slot: int, pos: int) -> int:
    """The hash of the store's last-layer K row at `pos` of `slot`, as it stands now."""
    return _row_hash(cache.keys(cache.n_layers - 1, slot, pos + 1)[:, pos])


class CudaBackend(Backend):
    name = "cuda"
    emulated = False
    simulated = False

    def __init__(self, weights: Weights, gemm: str = "auto", tile: int | None = None,
                 write_host_cache: bool = True):
        if gemm not in ("auto", "kernel", "cublas", "host"):
            raise ValueError(f"gemm must be auto, kernel, cublas or host, got {gemm!r}")
        self.cuda = runtime.load(self.simulated)               # LlamanbError: one line
        c = weights.config
        if self.simulated and c.hidden > SIM_MAX_HIDDEN:
            raise LlamanbError(f"backend {self.name!r} runs every CUDA thread as a Python thread: "
                               f"tiny models only (hidden <= {SIM_MAX_HIDDEN}); this one has "
                               f"hidden {c.hidden} (backend 'cuda' needs an NVIDIA GPU)")
        if gemm == "host" and not self.simulated:
            raise ValueError("gemm='host' is for the simulator only")
        from llamanb.cuda import kernels as kmod

        self.k = kmod.build(tile or (kmod.SIM_TILE if self.simulated else kmod.GPU_TILE))
        if gemm == "auto":
            gemm = "host" if self.simulated else ("cublas" if _cupy() else "kernel")
        if gemm == "cublas" and (self.simulated or not _cupy()):
            raise LlamanbError("gemm='cublas' needs CuPy on a GPU")
        self.gemm_mode = gemm
        self.write_host_cache = bool(write_host_cache)
        super().__init__(weights)
        where = "numba-cuda's simulator on the host CPU (SIMULATED)" if self.simulated else \
            f"GPU {self._device_name()}"
        self.description = (f"CUDA kernels after min_llm_inference on {where}; projections: "
                            f"{gemm}, tile {self.k.tile}")
        self.freqs = rope_for(c)
        self.scale = np.float32(c.head_dim ** -0.5)
        up = self.cuda.to_device
        f32 = lambda a: np.ascontiguousarray(a, dtype=np.float32)      # noqa: E731
        self.host_w = [dict(wqkv=f32(w.wqkv), wo=f32(w.wo), gate_up=f32(w.w_gate_up),
                            down=f32(w.w_down)) for w in weights.layers]
        self.w = [dict(attn_norm=up(f32(w.attn_norm)), ffn_norm=up(f32(w.ffn_norm)),
                       **{n: up(m) for n, m in hw.items()})
                  for w, hw in zip(weights.layers, self.host_w)]
        self.host_lm_head = f32(weights.lm_head)                         # [V, H]
        self.final_norm = up(f32(weights.final_norm))
        self.lm_head = up(self.host_lm_head)
        self._mirrors: dict[int, _Mirror] = {}

    def _device_name(self) -> str:
        try:
            return self.cuda.get_current_device().name.decode()
        except Exception:                                              # noqa: BLE001
            return "(name unavailable)"

    # --- launches ----------------------------------------------------------------------------
    def _gemm(self, a, wname: str, layer: int | None, out, accumulate: bool) -> None:
        """out [M, N] (+)= a [M, K] @ W^T, W [N, K] the named weight."""
        if self.gemm_mode == "host":
            w = self.host_lm_head if layer is None else self.host_w[layer][wname]
            r = a.copy_to_host() @ w.T
            if accumulate:
                r = out.copy_to_host() + r
            out.copy_to_device(np.ascontiguousarray(r, dtype=np.float32))
            return
        w = self.lm_head if layer is None else self.w[layer][wname]
        if self.gemm_mode == "cublas":
            import cupy as cp

            A, W, C = cp.asarray(a), cp.asarray(w), cp.asarray(out)
            if accumulate:
                C += A @ W.T
            else:
                cp.matmul(A, W.T, out=C)
            return
        self.k.gemm_nt[launch.gemm_nt(a.shape[0], w.shape[0], self.k.tile)](a, w, out,
                                                                          int(accumulate))

    def _rmsnorm(self, x, weight, out) -> None:
        self.k.rmsnorm[launch.row_warps(x.shape[0], self.k.tile)](
            x, weight, out, np.float32(self.config.rms_eps))

    def _mirror(self, cache: KVStore) -> _Mirror:
        m = self._mirrors.get(id(cache))
        shape = (cache.slots, cache.n_kv_heads, cache.head_dim, cache.max_seq)
        if m is None or m.store() is not cache or m.shape != shape:
            m = self._mirrors[id(cache)] = _Mirror(self.cuda, cache, self.config.n_layers)
            for key in [k for k, v in self._mirrors.items() if v.store() is None]:
                del self._mirrors[key]
        return m

    def _catch_up(self, m: _Mirror, step: Step, cache: KVStore) -> None:
        """Upload the positions a segment's sequence holds that this backend did not write (or
        that were rewritten since it did): all of 0 .. start-1 unless the device holds them and
        the store's row start-1 bears the seal this backend left on it."""
        for seg in step.segments:
            trusted = seg.start == 0 or (seg.start <= m.valid[seg.slot]
                                         and m.sealed(cache, seg.slot, seg.start - 1))
            if not trusted:
                for layer in range(self.config.n_layers):
                    kt = m.kt[layer].copy_to_host()
                    v = m.v[layer].copy_to_host()
                    kt[seg.slot, :, :, :seg.start] = cache.keys(layer, seg.slot, seg.start).transpose(0, 2, 1)
                    v[seg.slot, :, :seg.start] = cache.values(layer, seg.slot, seg.start)
                    m.kt[layer].copy_to_device(kt)
                    m.v[layer].copy_to_device(v)
                m.reseal(cache, seg.slot, 0, seg.start)
            m.valid[seg.slot] = seg.start

    # --- the seam ----------------------------------------------------------------------------
    def layers(self, x: np.ndarray, step: Step, cache: KVStore, collect: list | None = None) -> np.ndarray:
        with simulator_pace(self.simulated):
            return self._layers(x, step, cache, collect, range(self.config.n_layers))

    def block(self, layer: int, x: np.ndarray, step: Step, cache: KVStore) -> np.ndarray:
        with simulator_pace(self.simulated):
            return self._layers(x, step, cache, None, [layer])

    def _layers(self, x, step: Step, cache: KVStore, collect, layers) -> np.ndarray:
        cuda, k, c = self.cuda, self.k, self.config
        R, H, Nh, Nkv, d, F = x.shape[0], c.hidden, c.n_heads, c.n_kv_heads, c.head_dim, c.ffn
        if R * Nh > GRID_Y_MAX:
            raise LlamanbError(f"a step of {R} rows x {Nh} heads exceeds the {GRID_Y_MAX} "
                               f"(row, head) pairs of qkt's grid y (CUDA's gridDim.y limit): "
                               f"prefill in chunks of at most {GRID_Y_MAX // Nh} tokens")
        m = self._mirror(cache)
        self._catch_up(m, step, cache)
        real = step.slots >= 0
        row_len = np.where(real, step.positions + 1, 0).astype(np.int32)
        row_slot = np.where(real, step.slots, 0).astype(np.int32)
        cos, sin = cos_sin(step.positions, self.freqs)                      # [R, d/2]
        segs = step.segments
        seg = [np.array([getattr(s, f) for s in segs], dtype=np.int32)
               for f in ("slot", "row", "start", "n")]
        L_max = int(row_len.max())
        dev = {name: cuda.to_device(a) for name, a in (
            ("row_len", row_len), ("row_slot", row_slot), ("cos", np.ascontiguousarray(cos)),
            ("sin", np.ascontiguousarray(sin)), ("seg_slot", seg[0]), ("seg_row", seg[1]),
            ("seg_start", seg[2]), ("seg_n", seg[3]))}
        xd = cuda.to_device(np.ascontiguousarray(x, dtype=np.float32))
        h = cuda.device_array((R, H), np.float32)
        qkv = cuda.device_array((R, (Nh + 2 * Nkv) * d), np.float32)
        scores = cuda.device_array((R * Nh, max(L_max, 1)), np.float32)
        attn = cuda.device_array((R, Nh * d), np.float32)
        gu = cuda.device_array((R, 2 * F), np.float32)
        act = cuda.device_array((R, F), np.float32)
        T = k.tile
        for layer in layers:
            w = self.w[layer]
            self._rmsnorm(xd, w["attn_norm"], h)
            self._gemm(h, "wqkv", layer, qkv, False)
            k.rope[launch.elementwise(R * (Nh + Nkv) * (d // 2), T)](
                qkv, dev["cos"], dev["sin"], Nh + Nkv, d)
            k.fill_kv[launch.fill_kv([s.n for s in segs], Nkv, d, T)](
                qkv, dev["seg_slot"], dev["seg_row"], dev["seg_start"], dev["seg_n"],
                m.kt[layer], m.v[layer], Nh)
            if self.write_host_cache:
                q = qkv.copy_to_host()
                for s in segs:
                    rows = q[s.rows]
                    cache.write(layer, s.slot, s.start,
                                rows[:, Nh * d:(Nh + Nkv) * d].reshape(s.n, Nkv, d),
                                rows[:, (Nh + Nkv) * d:].reshape(s.n, Nkv, d))
            k.qkt[launch.qkt(R, Nh, L_max, T)](qkv, m.kt[layer], dev["row_slot"], dev["row_len"],
                                               scores, Nh, c.group, self.scale)
            k.softmax_rows[launch.row_warps(R * Nh, T)](scores, dev["row_len"], Nh)
            k.softmax_v[launch.softmax_v(R, Nh, d, T)](scores, m.v[layer], dev["row_slot"],
                                                       dev["row_len"], attn, Nh, c.group)
            self._gemm(attn, "wo", layer, xd, True)
            self._rmsnorm(xd, w["ffn_norm"], h)
            self._gemm(h, "gate_up", layer, gu, False)
            k.silu_mul[launch.elementwise(R * F, T)](gu, act)
            self._gemm(act, "down", layer, xd, True)
            if collect is not None:
                collect.append(xd.copy_to_host())
        for s in segs:
            m.valid[s.slot] = s.end
            m.reseal(cache, s.slot, s.start, s.end)
        return xd.copy_to_host()

    def head(self, x: np.ndarray) -> np.ndarray:
        with simulator_pace(self.simulated):
            cuda = self.cuda
            xd = cuda.to_device(np.ascontiguousarray(x, dtype=np.float32))
            h = cuda.device_array(x.shape, np.float32)
            out = cuda.device_array((x.shape[0], self.config.vocab), np.float32)
            self._rmsnorm(xd, self.final_norm, h)
            self._gemm(h, "lm_head", None, out, False)
            return out.copy_to_host()


class CudaSimBackend(CudaBackend):
    name = "cuda-simulated"
    emulated = True
    simulated = True


def _cupy() -> bool:
    from llamanb.platform.hardware import has_module

    if not has_module("cupy"):
        return False
    try:
        import cupy  # noqa: F401
    except Exception:                                                      # noqa: BLE001
        return False
    return True
