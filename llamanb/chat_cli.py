"""`python -m llamanb chat`: the terminal loop around llamanb.engine.chat.Chat.

    you> Hello!
    assistant> Hello! How can I help you today?
    you> /stats
    ...

/reset forgets the conversation, /stats prints what it cost, /quit (or Ctrl-D, or Ctrl-C at the
prompt) leaves with exit code 0. Ctrl-C while an answer streams stops that answer only.

In a terminal:
- the prompt is read with GNU readline where Python has it (line editing, arrow keys, history);
  readline reads key by key, so a pasted message of any length arrives whole (a terminal's own
  line editor stops at 4,095 characters), and a multi-line paste is one message (bracketed paste);
  the line scrolls sideways rather than wrapping, so a paste taller than the terminal still
  edits cleanly (wrapped, readline would redraw it rows too high once its start scrolled away);
- while an answer streams, the terminal neither echoes nor buffers keys into it (echo off; keys
  typed meanwhile are dropped when the answer ends);
- the chat runs as the terminal's foreground process group, so Ctrl-C reaches the chat alone:
  under `make chat`, make sees the chat's own exit code (0), not an interrupt.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import signal
import sys

from llamanb.errors import LlamanbError

COMMANDS = "/reset, /stats, /quit"
STOPS = {"length": "stopped at --max-new-tokens {n}",
         "context": "stopped: the context is full ({used}/{ctx} tokens); /reset to start over"}


def stats_line(chat) -> str:
    s = chat.stats()
    if not s["turns"]:
        return f"no turns yet | context {s['context_used']}/{s['context']} tokens"
    line = (f"turns {s['turns']} | context {s['context_used']}/{s['context']} tokens "
            f"(prefilled {s['prefilled']}, reused from the cache {s['reused']}, generated "
            f"{s['generated']}) | prefill {s['prefill_s']:.2f} s, decode "
            + (f"{s['decode_tok_s']:.1f} tok/s" if s["decode_tok_s"] == s["decode_tok_s"]
               else "-- (no decode steps yet)"))
    if "calls" in s:
        n = max(1, s["tokens_counted"])
        line += (f"\n[{chat.engine.backend.name}] {s['calls']} calls ({s['calls'] / n:.1f}/token), "
                 f"{s['bytes_to_device']:,} B to / {s['bytes_from_device']:,} B from the device, "
                 f"estimated device time {s['estimated_device_s'] * 1e3:.1f} ms (cost model, not "
                 f"measured)")
    return line


# ---- the terminal -----------------------------------------------------------------------------------
def _tty() -> int | None:
    try:
        return sys.stdin.fileno() if sys.stdin.isatty() else None
    except (AttributeError, ValueError, OSError):
        return None


def setup_readline() -> bool:
    """Line editing and in-session history for input() where GNU readline (or libedit) exists."""
    if _tty() is None:
        return False
    try:
        import readline
    except ImportError:
        return False
    with contextlib.suppress(Exception):
        readline.parse_and_bind("set enable-bracketed-paste on")
        # One row, scrolled sideways: a message that wraps to more rows than the terminal has
        # (a long paste) pushes the prompt's row off the top, and readline's redraw, which moves
        # the cursor up to that row, then lands every edit rows too high (a garbled screen).
        readline.parse_and_bind("set horizontal-scroll-mode on")
    return True


@contextlib.contextmanager
def foreground_group():
    """Run as the terminal's foreground process group (a job-control shell's move), so that
    Ctrl-C signals this process and not a parent such as make; the old group is restored after."""
    fd = _tty()
    if fd is None or not hasattr(os, "tcsetpgrp"):
        yield
        return
    try:
        old = os.tcgetpgrp(fd)
    except OSError:
        yield
        return
    ttou = signal.signal(signal.SIGTTOU, signal.SIG_IGN)   # set the terminal from the background
    tstp = signal.getsignal(signal.SIGTSTP)
    moved = False
    try:
        try:
            if os.getpgrp() != os.getpid():
                os.setpgid(0, 0)
            os.tcsetpgrp(fd, os.getpgrp())
            moved = old != os.getpgrp()
        except OSError:
            pass                                             # a session leader, say: leave it
        signal.signal(signal.SIGTTOU, ttou)
        if moved:                  # Ctrl-Z would stop us with no shell watching: not suspendable
            signal.signal(signal.SIGTSTP, signal.SIG_IGN)
        yield
    finally:
        if moved:
            signal.signal(signal.SIGTTOU, signal.SIG_IGN)
            with contextlib.suppress(OSError):
                os.tcsetpgrp(fd, old)
            signal.signal(signal.SIGTTOU, ttou)
            signal.signal(signal.SIGTSTP, tstp)


@contextlib.contextmanager
def keys_held_back():
    """While an answer streams: no echo of what is typed (it would land inside the answer) and no
    line editing; whatever was typed meanwhile is dropped afterwards. Ctrl-C still interrupts."""
    fd = _tty()
    if fd is None:
        yield
        return
    import termios

    try:
        old = termios.tcgetattr(fd)
    except termios.error:
        yield
        return
    new = list(old)
    new[3] &= ~(termios.ECHO | termios.ICANON)
    try:
        termios.tcsetattr(fd, termios.TCSANOW, new)
        yield
    finally:
        with contextlib.suppress(termios.error):
            termios.tcflush(fd, termios.TCIFLUSH)
            termios.tcsetattr(fd, termios.TCSANOW, old)


def _read(prompt: str) -> str | None:
    """One message; None at end of input (Ctrl-D)."""
    try:
        return input(prompt)
    except EOFError:
        return None


# ---- the loop ---------------------------------------------------------------------------------------
def _sampling(a, model):
    """(SamplingParams, repeat penalty included; the line that says what was chosen)."""
    from llamanb.engine.chat import recommended_sampling
    from llamanb.engine.sampling import SamplingParams

    if a.greedy:
        return SamplingParams(), "greedy, no repeat penalty (--greedy)"
    rec, where = recommended_sampling(model.source)
    pick = {k: (getattr(a, k) if getattr(a, k) is not None else v) for k, v in rec.items()}
    if pick["repeat_penalty"] < 1 or pick["repeat_penalty"] != pick["repeat_penalty"]:
        raise LlamanbError(f"--repeat-penalty must be >= 1 (1 = off), got {pick['repeat_penalty']}")
    seed = secrets.randbits(32) if a.seed is None else a.seed
    params = SamplingParams(pick["temperature"], pick["top_k"], pick["top_p"], seed,
                            pick["repeat_penalty"], pick["repeat_last_n"])
    if params.temperature == 0:
        how = "greedy"
    else:
        how = (f"temperature {params.temperature:g}, top-k {params.top_k or 'all'}, top-p "
               f"{params.top_p:g}, seed {seed}")
    if pick["repeat_penalty"] != 1:
        how += f", repeat penalty {pick['repeat_penalty']:g} over {pick['repeat_last_n']} tokens"
    explicit = any(getattr(a, k) is not None for k in rec)
    how += f" ({'as given, the rest ' if explicit else ''}{where}; --greedy for a reproducible run)"
    return params, how


def main(a) -> int:
    from llamanb.engine.chat import Chat
    from llamanb.engine_choice import choose_engine as _engine
    from llamanb.io.store import load_model
    from llamanb.model.tokenizer import as_text

    system = None if a.system is None else as_text(a.system, "--system")
    if a.greedy:                                  # the arguments, before any work
        given = [f for f, v in (("--temperature", a.temperature), ("--top-k", a.top_k),
                                ("--top-p", a.top_p), ("--repeat-penalty", a.repeat_penalty))
                 if v is not None]
        if given:
            raise LlamanbError(f"--greedy takes the most likely token: drop {', '.join(given)}")
    if a.temperature is not None or a.top_k is not None or a.top_p is not None:
        from llamanb.engine.sampling import SamplingParams  # the values themselves, before any work

        SamplingParams(a.temperature or 0.0, a.top_k, 1.0 if a.top_p is None else a.top_p)
    if a.repeat_penalty is not None and not 1 <= a.repeat_penalty < float("inf"):
        raise LlamanbError(f"--repeat-penalty must be >= 1 (1 = off), got {a.repeat_penalty}")
    model = load_model(a.model)
    params, how = _sampling(a, model)
    engine = _engine(model, a.backend, a.dtype)
    context = min(a.context, model.config.max_seq)
    chat = Chat(engine, system=system, context=context, params=params,
                max_new_tokens=a.max_new_tokens)
    editing = setup_readline()
    print(f"chat with {model.config.name} on {engine.backend.description} | context {context} "
          f"tokens\nsampling: {how}\n"
          f"commands: {COMMANDS}; Ctrl-D or Ctrl-C to leave"
          + ("" if editing or _tty() is None else " (no readline here: no line editing)"),
          file=sys.stderr)
    with foreground_group(), ctrl_c_interrupts():
        return _loop(chat, a)


@contextlib.contextmanager
def ctrl_c_interrupts():
    """Ctrl-C is how the chat stops an answer or leaves: a process started with SIGINT ignored
    (a shell's `&`, nohup, a test runner started that way) inherits the ignoring, and Python then
    installs no KeyboardInterrupt handler. In a terminal the chat takes SIGINT back (it is the
    terminal's foreground group, see foreground_group) and restores the old disposition after."""
    if _tty() is None or signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _loop(chat, a) -> int:
    from llamanb.engine.chat import ContextFull

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
        if line.startswith("/") and "\n" not in line:
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
        why = chat.fits(line)
        if why:
            print(f"(not sent: {why})", file=sys.stderr)
            continue
        print("assistant> ", end="", flush=True)
        try:
            with keys_held_back():
                turn = chat.send(line, on_token=lambda t, piece: print(piece, end="", flush=True))
        except ContextFull as e:
            print(f"\n(not sent: {e})", file=sys.stderr)
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
        elif turn.stop_reason in STOPS:
            print("(" + STOPS[turn.stop_reason].format(n=a.max_new_tokens, used=len(chat.ids),
                                                       ctx=chat.context) + ")", file=sys.stderr)
