"""llama.cpp's side of `bench --backend cpu`, run by the peer's own Python (stdlib + llama_cpp +
numpy only; llamanb is not importable there). One JSON message per line on stdin/stdout:

    in:  {"gguf", "ids", "steps", "precision", "threads"}    out: ["ready", info]
    in:  "round"                                out: ["round", [{prefill_128, prefill_512, decode}, tokens]]
    in:  "finish"                               out: ["finished", {"peak_rss_mb"}]

The work is bench.runners' for llamanb: prefill of 128 and 512 prompt tokens (one eval each, the
KV cache reset first), and decode: a 128-token prefill, then `steps` greedy single-token evals.
"""
import json
import sys
import time
import traceback


def peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024 / 1e6
    return float("nan")


def main() -> None:
    cfg = json.loads(sys.stdin.readline())
    import llama_cpp
    import numpy as np

    t0 = time.perf_counter()
    llm = llama_cpp.Llama(model_path=cfg["gguf"], n_ctx=1024, n_batch=512, n_ubatch=512,
                          n_threads=cfg["threads"], n_threads_batch=cfg["threads"],
                          verbose=False)
    prec = cfg.get("precision") or cfg["gguf"].rsplit(".", 2)[-2]
    own = prec == "FILE"                  # the model's own file, whatever its blocks
    if own:
        prec = "the file's blocks"
    info = {"load_s": time.perf_counter() - t0,
            "backend": f"llama.cpp (llama-cpp-python {llama_cpp.__version__}) {prec}",
            "dtype": prec, "threads": f"llama.cpp {cfg['threads']}"}
    # its KV cache as created (llama_context_default_params: F16 keys and values), per position
    size = {llama_cpp.GGML_TYPE_F32: 4, llama_cpp.GGML_TYPE_F16: 2}
    cp, m = llm.context_params, llm.model
    if cp.type_k in size and cp.type_v in size:
        head_dim = llama_cpp.llama_model_n_embd(m) // llama_cpp.llama_model_n_head(m)
        info["kv_bytes_per_position"] = (llama_cpp.llama_model_n_layer(m) * llama_cpp.llama_model_n_head_kv(m)
                                         * head_dim * (size[cp.type_k] + size[cp.type_v]))
    if own:              # the bytes of its tensors (the cpu backend's panels may hold more)
        info["weight_bytes"] = llama_cpp.llama_model_size(m)
    print(json.dumps(["ready", info]), flush=True)
    ids, steps = cfg["ids"], cfg["steps"]

    def last_logits():
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(llm.n_vocab(),))

    while True:
        cmd = json.loads(sys.stdin.readline())
        if cmd != "round":
            break
        row = {}
        for n in (128, 512):
            llm.reset()
            t = time.perf_counter()
            llm.eval(ids[:n])
            row[f"prefill_{n}"] = n / (time.perf_counter() - t)
        llm.reset()
        llm.eval(ids[:128])
        tok = int(np.argmax(last_logits()))
        tokens = [tok]
        t = time.perf_counter()
        for _ in range(steps):
            llm.eval([tok])
            tok = int(np.argmax(last_logits()))
            tokens.append(tok)
        row["decode"] = steps / (time.perf_counter() - t)
        print(json.dumps(["round", [row, tokens]]), flush=True)
    print(json.dumps(["finished", {"peak_rss_mb": peak_rss_mb()}]), flush=True)


if __name__ == "__main__":
    try:
        main()
    except Exception as e:            # one line back to the parent
        tb = traceback.extract_tb(e.__traceback__)
        where = f" (at line {tb[-1].lineno})" if tb else ""
        print(json.dumps(["error", f"{type(e).__name__}: {e}{where}"]), flush=True)
