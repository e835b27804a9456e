"""`python -m llamanb bench`: llamanb against HF transformers (fp32 and bf16) on this CPU.

What is measured, all in one invocation, on the same model and the same token ids:

* prefill of 128 and 512 tokens (tok/s): one forward over the prompt that fills the KV cache and
  computes logits for the last position only (llamanb always does; transformers is called with
  `logits_to_keep=1` so that it does the same work instead of a [S, V] LM head);
* decode (tok/s): after a 128-token prefill, N single-token steps, greedy (argmax), each feeding
  the KV cache of the previous one. For transformers this is a hand-written loop of
  `model(tok, past_key_values=..., use_cache=True)` under `torch.inference_mode()`: the same work
  as llamanb's loop, without `generate()`'s logits processors and stopping criteria on top
  (on the 2-core dev machine generate() gave the same tokens at 0-15 % lower tok/s);
* peak memory (peak RSS, MB = 10^6 bytes) of each engine, including loading its model: every
  engine lives in its own child process, so this is that process's RSS high-water mark (VmHWM in
  /proc/self/status), read by the child after its last run. It includes the interpreter and the
  imports (numpy; torch and transformers for the transformers engines), as for a real user.

How: the parent measures the memory-read bandwidth first, with nothing else running. Then it
starts one long-lived child process per engine (multiprocessing, 'spawn': a fresh interpreter;
torch is imported only in the transformers children, never in the parent or the llamanb child)
and loads the engines one after another. The timed rounds are interleaved round-robin: round r
asks each engine in turn for prefill 128, prefill 512 and decode N and waits for its reply (and
0.3 s more, while OpenBLAS's idle threads stop spinning) before asking the next, so only one
engine computes at any moment, on all cores (numpy's OpenBLAS with its default thread count,
torch with torch.set_num_threads(os.cpu_count())). The order rotates every round (A B C, B C A,
C A B, ...) so that no engine is always first. Round 0 is the warm-up, rounds 1 .. --runs are
timed, and the table shows each engine's medians. A shared host's speed drifts (10-20 % over a
minute); interleaving spreads that drift over all engines alike, where running them one after
another charged it to whichever ran in the slow minute. A ratio between two engines (the cpu
backend against llama.cpp, say) is therefore taken round by round -- each round's two rates met
the same machine -- and reported as the median of those paired samples with their min and
quartiles; a target counts as met only when the lower quartile clears it, over at least 7 rounds
(`--runs 7`; fewer rounds print UNDECIDED). See report.MIN_ROUNDS. Peak memory is one reading
per engine (its child's VmHWM after the last round): a cpu engine's against llama.cpp's at the
same precision is one ratio, at most report.RSS_TARGET.

Parent and child speak over a multiprocessing Pipe, one request and one reply at a time: the
child answers ("ready", info) once loaded, ("round", (tok/s, greedy tokens)) to "round" and
("finished", {"peak_rss_mb": ...}) to "finish", after which it exits; any exception in a child
comes back as ("error", one line) and is raised in the parent as a LlamanbError ("bench:
transformers_fp32 failed: ..."). Children ignore Ctrl-C (SIGINT); on any error or interrupt the
parent terminates them (SIGTERM, then SIGKILL); a child whose parent dies anyway (SIGKILL) exits
at once too (a watchdog thread waits on the parent's sentinel), so none is left behind.

Roofline: decode is bound by reading every weight once per token (the LM head included; the
embedding is read one row at a time) and the cached keys and values of every earlier position.
The machine's memory-read bandwidth is measured with a 1 GiB float32 array (far larger than any
cache) in four ways: np.add.reduce and np.maximum.reduce, each with one Python thread per core on
its own slice (numpy drops the GIL), and OpenBLAS's two GEMV kernels (matrix @ vector and vector @
matrix, OpenBLAS threads). The best median of the four is taken as the bandwidth: the higher it
is, the harder the roofline is to reach. Decode roofline tok/s = bandwidth / (weight bytes + KV
bytes per token). The KV bytes are counted, not guessed: each engine reports its cache's bytes
per position (layers x KV heads x head_dim x (key + value element sizes): 46 KB for SmolLM2-135M
in float32, half that in llama.cpp's default F16 cache), times the mean context of the timed
decode steps (runners.decode_kv_positions: 160.5 positions for 64 steps after 128). That is
7.4 MB per token in float32: 1.4 % of the float32 weights' bytes, 2.7 % of bfloat16's, more for
Q4_1.

Other processes on the machine skew everything; the share of CPU they used during the run is
printed, with a warning when it is large.

`--batching` (batching.py) measures serving instead; `--kernels DIR` (kernel_ab.py) judges a
change to the cpu kernels: one process, the packaged build and each changed copy alternated token
by token.
"""
