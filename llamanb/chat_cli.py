"""`python -m llamanb chat`: the terminal loop around llamanb.chat.Chat.

    you> Hello!
    assistant> Hello! How can I help you today?
    you> /stats
    ...

/reset forgets the conversation, /stats prints what it cost, /quit (or Ctrl-D, or Ctrl-C at the
prompt) leaves with exit code 0. Ctrl-C while an answer streams stops that answer only.
"""
from __future__ import annotations

import secrets
import sys

from .errors import LlamanbError

COMMANDS = "/reset, /stats, /quit"


def stats_line(chat) -> str:
    s = chat.stats()
    line = (f"turns {s['turns']} | context {s['context_used']}/{s['context']} tokens "
            f"(prefilled {s['prefilled']}, reused from the cache {s['reused']}, generated "
            f"{s['generated']}) | prefill {s['prefill_s']:.2f} s, decode {s['decode_tok_s']:.1f} tok/s")
    if "calls" in s:
        n = max(1, s["tokens_counted"])
        line += (f"\n[{chat.engine.backend.name}] {s['calls']} calls ({s['calls'] / n:.1f}/token), "
                 f"{s['bytes_to_device']:,} B to / {s['bytes_from_device']:,} B from the device, "
                 f"estimated device time {s['estimated_device_s'] * 1e3:.1f} ms (cost model, not "
                 f"measured)")
    return line


def _read(prompt: str) -> str | None:
    """One line of input; None at end of input (Ctrl-D)."""
    try:
        return input(prompt)
    except EOFError:
        return None


def main(a) -> int:
    from .chat import Chat, ContextFull
    from .cli import _engine
    from .generate import SamplingParams
    from .io.store import load_model
    from .tokenizer import as_text

    seed = secrets.randbits(32) if a.seed is None else a.seed
    params = SamplingParams(a.temperature, a.top_k, a.top_p, seed)
    system = None if a.system is None else as_text(a.system, "--system")
    model = load_model(a.model)
    engine = _engine(model, a.backend, a.dtype)
    context = min(a.context, model.config.max_seq)
    chat = Chat(engine, system=system, context=context, params=params,
                max_new_tokens=a.max_new_tokens)
    print(f"chat with {model.config.name} on {engine.backend.description} | context {context} "
          f"tokens | {'greedy' if params.temperature == 0 else f'seed {seed}'}\n"
          f"commands: {COMMANDS}; Ctrl-D or Ctrl-C to leave", file=sys.stderr)
    while True:
        try:
            line = _read("you> ")
        except KeyboardInterrupt:
            line = None
        if line is None:
            print("\nbye", file=sys.stderr)
            return 0
        line = line.strip()
        if not line:
            continue
        if line.startswith("/"):
            cmd = line.split()[0].lower()
            if cmd in ("/quit", "/exit"):
                print("bye", file=sys.stderr)
                return 0
            if cmd == "/reset":
                chat.reset()
                print("(conversation forgotten, cache empty)", file=sys.stderr)
            elif cmd == "/stats":
                print(stats_line(chat), file=sys.stderr)
            else:
                print(f"unknown command {cmd}; commands: {COMMANDS}", file=sys.stderr)
            continue
        print("assistant> ", end="", flush=True)
        try:
            turn = chat.send(line, on_token=lambda t, piece: print(piece, end="", flush=True))
        except ContextFull as e:
            print(f"\n(context full: {e})", file=sys.stderr)
            continue
        except KeyboardInterrupt:
            print("\n(interrupted before the answer began)", file=sys.stderr)
            continue
        except LlamanbError as e:
            print(f"\n(error: {e})", file=sys.stderr)
            continue
        print(flush=True)
        if turn.stop_reason == "interrupted":
            print("(answer interrupted; Ctrl-C at the prompt leaves)", file=sys.stderr)
        elif turn.stop_reason == "length":
            print(f"(stopped at --max-new-tokens {a.max_new_tokens})", file=sys.stderr)
