"""Verification against HF transformers.

Gate rule (vLLM's check_logprobs_close): decode greedily from the same prompt ids, walk both token
sequences; where they first differ, each side's token must be among the other side's top-5. After
a divergence the sequences are conditioned on different text, so comparison stops there.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from llamanb.engine.engine import Engine
from llamanb.errors import LlamanbError
from llamanb.platform.paths import REFERENCE_DIR, reference_file
from llamanb.platform.progress import stages
from llamanb.io.store import Model, load_model
from llamanb.check.greedy import GreedyRun, engine_greedy

REFERENCE_NAME = "hf_smollm2_reference.json"
# The prompts `verify --live` asks transformers about: data/prompts.json of this checkout.
PROMPTS_FILE = REFERENCE_DIR.parent / "prompts.json"


def default_reference() -> Path:
    """$LLAMANB_REFERENCE, else data/reference/ of this checkout (transformers' outputs, shipped)."""
    if os.environ.get("LLAMANB_REFERENCE"):
        return Path(os.environ["LLAMANB_REFERENCE"])
    return reference_file(REFERENCE_NAME)


def read_reference(path: Path) -> dict:
    try:
        ref = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise LlamanbError(f"reference file not found: {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise LlamanbError(f"{path}: not valid JSON") from None
    cases = ref.get("cases") if isinstance(ref, dict) else None
    if not isinstance(cases, list) or not cases:
        raise LlamanbError(f"{path}: expected an object with a non-empty 'cases' list")
    for n, c in enumerate(cases):
        for key in ("prompt_ids", "greedy_ids", "top5"):
            if key not in c:
                raise LlamanbError(f"{path}: case {c.get('name', n)} lacks {key!r}")
        if len(c["top5"]) != len(c["greedy_ids"]):
            raise LlamanbError(f"{path}: case {c.get('name', n)}: top5 and greedy_ids differ in length")
    return ref


@dataclass
class CaseResult:
    name: str
    passed: bool
    steps: int                   # tokens compared
    diverged_at: int | None      # first differing step, None if identical
    detail: str
    max_logit_diff: float        # max |ours - ref| over the reference top-5 logits, identical prefix


def greedy_with_top5(engine: Engine, prompt_ids, steps: int, stop_ids=(), until_differs=None) -> GreedyRun:
    """llamanb greedy decoding, keeping each step's top-5 and full logits row (stopping after
    the first token that differs from `until_differs`, when given)."""
    return engine_greedy(engine, prompt_ids, steps, stop_ids, k=5, keep_logits=True,
                         until_differs=until_differs)


def compare(name: str, run: GreedyRun, ref: list[int], ref_top: list[dict], decode) -> CaseResult:
    ours = run.ids
    n = min(len(ours), len(ref))
    max_diff = 0.0
    for i in range(n):
        r_ids, r_logits = ref_top[i]["ids"], ref_top[i]["logits"]
        max_diff = max(max_diff, float(np.max(np.abs(run.logits[i][r_ids] - np.asarray(r_logits)))))
        if ours[i] != ref[i]:
            ok = ours[i] in r_ids and ref[i] in run.top_ids[i]
            why = (f"diverged at step {i}: ours {ours[i]} {decode(ours[i])!r}, ref {ref[i]} "
                   f"{decode(ref[i])!r}; " + ("each in the other's top-5" if ok else
                                             "NOT in each other's top-5"))
            return CaseResult(name, ok, i + 1, i, why, max_diff)
    if len(ours) != len(ref):
        return CaseResult(name, False, n, n, f"lengths differ after {n} identical tokens "
                          f"(ours {len(ours)}, ref {len(ref)})", max_diff)
    return CaseResult(name, True, n, None, f"{n}/{n} tokens identical", max_diff)


def run_reference(model: Model, ref: dict, engine: Engine | None = None, out=None) -> list[CaseResult]:
    engine = engine or Engine(model)
    results = []
    dec = lambda t: model.tokenizer.decode([t])  # noqa: E731
    with stages() as say:                        # a notebook shows which case is running
        for n, c in enumerate(ref["cases"]):
            name = c.get("name", f"case{n}")
            say(f"reference gate: case {n + 1} of {len(ref['cases'])} ({name})")
            run = greedy_with_top5(engine, c["prompt_ids"], len(c["greedy_ids"]),
                                   stop_ids=model.config.eos_ids, until_differs=c["greedy_ids"])
            r = compare(name, run, c["greedy_ids"], c["top5"], dec)
            results.append(r)
            print(f"{'PASS' if r.passed else 'FAIL'} {name:<16} {r.detail}; "
                  f"max |dlogit| on ref top-5 = {r.max_logit_diff:.2e}", file=out, flush=True)
    return results


def summary(results: list[CaseResult], out=None) -> int:
    out = out or sys.stdout          # looked up at call time (a test may have replaced it)
    passed = sum(r.passed for r in results)
    print(f"{passed} passed, {len(results) - passed} failed", file=out)
    return 0 if passed == len(results) else 1


def reference_cli(model_spec, reference, backend: str = "numpy", dtype: str = "float32") -> int:
    """The reference gate on one engine. dtype: "bf16" runs the numpy or cpu backend in bfloat16
    (the reference stays the float32 one: the top-5 rule judges the first difference)."""
    path = Path(reference) if reference else default_reference()
    ref = read_reference(path)
    model = load_model(model_spec)
    if dtype != "float32" and backend not in ("numpy", "cpu"):
        raise LlamanbError(f"--dtype applies to the numpy and cpu backends, not {backend!r}")
    from llamanb.cpu.backend import check_dtype

    check_dtype(backend, dtype)
    engine = Engine(model, backend, **({"dtype": dtype} if dtype != "float32" else {}))
    what = (f"numpy engine, {dtype}" if backend == "numpy" else
            engine.backend.description)
    print(f"verify: {model.config.name} ({what}) against {path.name}: "
          f"{ref.get('reference', 'unknown system')}")
    return summary(run_reference(model, ref, engine))


def live_references(model: Model, steps: int, prompts_file: Path | None = None) -> dict:
    """Fresh references from transformers, in the shared reference file's schema."""
    from llamanb.check import hf_reference

    prompts_file = Path(prompts_file) if prompts_file else PROMPTS_FILE
    if not prompts_file.is_file():
        raise LlamanbError(f"prompt list not found: {prompts_file} (it ships with the repository: "
                           "restore it with `git checkout -- data/prompts.json`)")
    try:
        prompts = json.loads(prompts_file.read_text(encoding="utf-8"))["cases"]
        prompts = [(str(p["name"]), bool(p["chat"]), str(p["text"])) for p in prompts]
    except (ValueError, KeyError, TypeError) as e:          # JSON errors are ValueErrors
        raise LlamanbError(f"{prompts_file}: not a prompt list ({type(e).__name__}: {e}; expected "
                           '{"cases": [{"name", "chat", "text"}, ...]})') from None
    hf = hf_reference.load_hf(model)
    import torch
    import transformers

    cases = []
    for name, chat, text in prompts:
        ids = model.tokenizer.encode_prompt(text, chat=chat)
        g, top5 = hf_reference.greedy_with_top5(hf, ids, steps, stop_ids=model.config.eos_ids)
        cases.append({"name": name, "chat": chat, "text": text, "prompt_ids": ids,
                      "greedy_ids": g, "greedy_text": model.tokenizer.decode(g), "top5": top5})
    return {"model": str(model.source.name),
            "reference": f"transformers {transformers.__version__}, torch {torch.__version__}, fp32 CPU",
            "cases": cases}


def live_cli(model_spec, steps: int, save: str | None) -> int:
    model = load_model(model_spec)
    print(f"verify --live: computing references with transformers for {model.config.name} ...",
          flush=True)
    ref = live_references(model, steps)
    if save:
        tmp = Path(save).with_name(Path(save).name + ".tmp")
        tmp.write_text(json.dumps(ref, indent=1))
        os.replace(tmp, save)
        print(f"saved {len(ref['cases'])} references to {save}")
    return summary(run_reference(model, ref))


def diagnose(model: Model, ids: list[int]) -> list[tuple[str, float, float, float]]:
    """Per-layer (label, cosine similarity, max |diff|, max |diff| / max |ref|) of hidden states, llamanb vs transformers,
    over all positions of ids."""
    from llamanb.check import hf_reference
    from llamanb.model.ops import rms_norm

    engine = Engine(model)
    ours: list[np.ndarray] = []
    engine.forward(ids, engine.new_cache(len(ids)), collect=ours)
    ours[-1] = rms_norm(ours[-1], model.weights.final_norm, model.config.rms_eps)
    theirs = hf_reference.hidden_states(hf_reference.load_hf(model), ids)
    L = model.config.n_layers
    rows = []
    for i, (a, b) in enumerate(zip(ours, theirs)):
        label = "embedding" if i == 0 else (f"block {i}" if i < L else f"block {L} + final norm")
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        cos = float(np.sum(a64 * b64) / (np.linalg.norm(a64) * np.linalg.norm(b64)))
        diff = float(np.max(np.abs(a64 - b64)))
        rows.append((label, cos, diff, diff / float(np.max(np.abs(b64)))))
    return rows


def diagnose_cli(model_spec, prompt: str) -> int:
    model = load_model(model_spec)
    ids = model.tokenizer.encode_prompt(prompt)
    print(f"diagnose: {model.config.name}, {len(ids)} tokens, hidden states llamanb vs transformers")
    rows = diagnose(model, ids)
    print(f"{'layer':<24} {'cosine':>12} {'max |diff|':>12} {'/ max |ref|':>12}")
    for label, cos, diff, rel in rows:
        print(f"{label:<24} {cos:>12.9f} {diff:>12.3e} {rel:>12.3e}")
    worst = min(r[1] for r in rows)
    print(f"lowest cosine similarity: {worst:.8f}")
    return 0 if worst > 0.999 else 1
