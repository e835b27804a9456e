"""The llama.cpp peer of `bench --backend cpu`: GGUF files it can read at our precisions, and its
runner in a child process of whichever Python has `llama_cpp` installed.

    the model's GGUF (any quantisation) --gguf package--> $LLAMANB_CACHE/peer/<name>-<hash>.F32.gguf
                                                                          .../<name>-<hash>.BF16.gguf
    the model's GGUF itself, where its layer matrices are Q4_1     (llama.cpp's Q4_1 engine, beside
                                                                    the cpu backend's --dtype q4_1)
    ... or of other formats the cpu backend runs from their blocks  (llama.cpp on the file, beside
                                                                    --dtype auto)

Both files hold the weights llamanb computes with (dequantised by the `gguf` package, exactly as
llamanb does, tests/io/test_gguf.py), as float32 or rounded to bfloat16 (1-D norms stay float32, as
llama.cpp's own converter keeps them). Written to a temporary file and renamed into place.

Which Python: `--peer-python`, else $LLAMANB_PEER_PYTHON, else this one if it can import
llama_cpp. llama-cpp-python compiles llama.cpp when installed (about 12 minutes on 2 cores); keep
it in a virtual environment of its own (README, "Benchmark"). Without one, the bench says so and
measures llamanb alone.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from importlib.util import find_spec
from pathlib import Path

from llamanb.errors import LlamanbError

PEERS = {"llamacpp_f32": "F32", "llamacpp_bf16": "BF16", "llamacpp_q4_1": "Q4_1",
         "llamacpp_file": "FILE"}
# the peers that run the model's own file, and the cpu backend dtype that runs it beside them
QUANT_PEERS = {"Q4_1": "q4_1", "FILE": "auto"}


def source_quant(source, model=None) -> str | None:
    """How the bench runs a GGUF file's own blocks, beside llama.cpp running the file itself:
    "Q4_1" when every layer matrix is Q4_1 (the shipped model; the cpu backend's --dtype q4_1),
    "FILE" when they are stored otherwise and the cpu backend runs every matrix of `model` (the
    file, loaded) from its blocks (--dtype auto: Q4_0, Q4_K_M, ...); None for anything else (or
    not a GGUF)."""
    from llamanb.io.gguf import tensor_index

    source = Path(source)
    if source.suffix != ".gguf" or not source.is_file():
        return None
    kinds = {q for name, (q, dims, _, _) in tensor_index(source).items()
             if name.startswith("blk.") and len(dims) == 2}
    if kinds == {"Q4_1"}:
        return "Q4_1"
    if model is not None and not kinds <= {"F32", "F16", "BF16"}:
        from llamanb.cpu.backend import runs_from_blocks

        if runs_from_blocks(model.weights, model.config):
            return "FILE"
    return None
RUNNER = Path(__file__).with_name("peer_llamacpp.py")


def peer_python(option: str | None = None) -> tuple[str | None, str]:
    """(interpreter that imports llama_cpp, its version) or (None, why not)."""
    py = option or os.environ.get("LLAMANB_PEER_PYTHON") or (
        sys.executable if find_spec("llama_cpp") else None)
    if py is None:
        return None, ("llama.cpp peer not measured: llama_cpp is not importable here (pass "
                      "--peer-python or set LLAMANB_PEER_PYTHON to a Python that has it)")
    try:
        out = subprocess.run([py, "-c", "import llama_cpp; print(llama_cpp.__version__)"],
                             capture_output=True, text=True, timeout=120)
    except OSError as e:
        raise LlamanbError(f"peer python {py!r} does not run: {e}") from None
    if out.returncode != 0:
        raise LlamanbError(f"peer python {py!r} cannot import llama_cpp")
    return py, out.stdout.strip()


def make_ggufs(source: Path, cache: Path) -> dict[str, Path]:
    """{"F32": path, "BF16": path}: the model re-written at those precisions (cached)."""
    import numpy as np
    from gguf import GGMLQuantizationType as Q
    from gguf import GGUFReader, GGUFValueType, GGUFWriter, LlamaFileType
    from gguf.quants import dequantize, quantize

    source = Path(source)
    st = source.stat()
    tag = hashlib.sha256(f"{source.resolve()}|{st.st_size}|{st.st_mtime_ns}|peer-v1".encode()).hexdigest()[:16]
    out = {p: cache / f"{source.stem}-{tag}.{p}.gguf" for p in ("F32", "BF16")}
    if all(p.is_file() for p in out.values()):
        return out
    cache.mkdir(parents=True, exist_ok=True)
    reader = GGUFReader(source)
    arch = reader.fields["general.architecture"].contents()
    for prec, path in out.items():
        if path.is_file():
            continue
        fd, tmp = tempfile.mkstemp(dir=cache, prefix=path.name + ".", suffix=".tmp")
        os.close(fd)
        try:
            w = GGUFWriter(tmp, arch)
            for name, f in reader.fields.items():
                if name.startswith("GGUF.") or name in ("general.architecture", "general.file_type"):
                    continue
                vtype = f.types[0]
                sub = f.types[-1] if vtype == GGUFValueType.ARRAY else None
                w.add_key_value(name, f.contents(), vtype, sub)
            w.add_file_type(LlamaFileType.ALL_F32 if prec == "F32" else LlamaFileType.MOSTLY_BF16)
            for t in reader.tensors:
                a = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
                if prec == "BF16" and a.ndim > 1:
                    w.add_tensor(t.name, quantize(a, Q.BF16), raw_dtype=Q.BF16)   # bytes
                else:
                    w.add_tensor(t.name, a)
            w.write_header_to_file()
            w.write_kv_data_to_file()
            w.write_tensors_to_file()
            w.close()
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return out


class PeerProcess:
    """llama.cpp in a child process of the peer's Python, with EngineProcess's interface
    (bench.child): ask() -> ready info, ask("round") -> (tok/s row, greedy tokens), finish()."""

    def __init__(self, engine: str, python: str, gguf: Path, ids: list[int], steps: int):
        self.engine = engine
        precision = PEERS.get(engine, "")
        self.proc = subprocess.Popen([python, str(RUNNER)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                     start_new_session=True)
        self._send({"gguf": str(gguf), "ids": ids, "steps": steps, "precision": precision,
                    "threads": os.cpu_count() or 1})

    def _send(self, msg) -> None:
        try:
            self.proc.stdin.write(json.dumps(msg) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise LlamanbError(f"bench: {self.engine} failed: its process ended") from None

    def ask(self, request: str | None = None):
        if request is not None:
            self._send(request)
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(5)
            raise LlamanbError(f"bench: {self.engine} failed: its process exited "
                               f"(code {self.proc.returncode})")
        kind, payload = json.loads(line)
        if kind == "error":
            raise LlamanbError(f"bench: {self.engine} failed: {payload}")
        return tuple(payload) if kind == "round" else payload

    def finish(self) -> dict:
        out = self.ask("finish")
        self.proc.wait(30)
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
