"""Tokenizer and chat template, on top of the `tokenizers` library.

Two sources: an HF `tokenizer.json` (+ `tokenizer_config.json` for the chat template), or the
vocabulary, merges and template stored in a GGUF file, converted once into a `tokenizer.json`.

GGUF conversion follows llama.cpp's pre-tokenizer for each `tokenizer.ggml.pre`. For SmolLM2
('smollm') llama.cpp splits off every numeral (Unicode class N) on its own before the GPT-2
regex, as the original HF tokenizer does; transformers' GGUF converter (5.23) skips that step, so
its ids differ where a numeral follows whitespace (a newline and a tab before "8"; "x ²") or is
not ASCII. (A bare run of ASCII digits comes out the same: the vocabulary has no token holding two
digits.) We follow llama.cpp and the original tokenizer; tests/test_tokenizer.py checks both
against transformers.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import cached_property
from datetime import datetime
from pathlib import Path

from llamanb.errors import LlamanbError

# llama.cpp's pre-tokenizer regexes, by `tokenizer.ggml.pre`.
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_DIGITS_THEN_GPT2 = {"smollm", "starcoder", "refact", "command-r", "codeshell"}
_GPT2 = {"gpt2", "default", "mpt", "olmo"}
_LLAMA3 = {"llama-bpe", "llama3", "llama-v3", "smaug-bpe", "dbrx"}


def tokenizer_json_from_gguf(meta: dict) -> str:
    """Build a `tokenizers` Tokenizer from GGUF tokenizer metadata; return its JSON."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

    kind = meta.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise LlamanbError(f"GGUF tokenizer type {kind!r} is not supported (byte-level BPE 'gpt2' is)")
    if not meta.get("tokenizer.ggml.tokens") or not meta.get("tokenizer.ggml.merges"):
        raise LlamanbError("GGUF tokenizer lacks its token list or BPE merges")
    tokens = list(meta["tokenizer.ggml.tokens"])
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges,
                               fuse_unk=False))
    pre = meta.get("tokenizer.ggml.pre", "default")
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in _DIGITS_THEN_GPT2:
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level])
    elif pre in _GPT2:
        tok.pre_tokenizer = byte_level
    elif pre in _LLAMA3:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        raise LlamanbError(f"GGUF pre-tokenizer {pre!r} is not supported")
    tok.decoder = decoders.ByteLevel()
    types = list(meta.get("tokenizer.ggml.token_type") or [])
    control = [AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty == 3]
    user = [AddedToken(t, special=False, normalized=False) for t, ty in zip(tokens, types) if ty == 4]
    tok.add_special_tokens(control)
    tok.add_tokens(user)
    bos = meta.get("tokenizer.ggml.bos_token_id")
    if meta.get("tokenizer.ggml.add_bos_token") and bos is not None:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{tokens[bos]} $A", pair=f"{tokens[bos]} $A {tokens[bos]} $B",
            special_tokens=[(tokens[bos], bos)])
    return tok.to_str()


def tokenizer_config_from_gguf(meta: dict) -> dict:
    tokens = meta["tokenizer.ggml.tokens"]

    def name(key):
        i = meta.get(f"tokenizer.ggml.{key}")
        return tokens[i] if i is not None and 0 <= i < len(tokens) else None

    return {"chat_template": meta.get("tokenizer.chat_template"), "bos_token": name("bos_token_id"),
            "eos_token": name("eos_token_id")}


def as_text(text, what: str = "prompt") -> str:
    """text as a str the tokenizer can take: valid UTF-8 bytes are decoded; invalid bytes, or a
    str holding lone surrogates (how Python passes undecodable command-line bytes along), are a
    LlamanbError that says where the first bad byte is."""
    if isinstance(text, (bytes, bytearray)):
        try:
            return bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            raise LlamanbError(f"{what} is not valid UTF-8: byte 0x{text[e.start]:02x} at byte "
                               f"offset {e.start}") from None
    if not isinstance(text, str):
        raise LlamanbError(f"{what} must be a str (or UTF-8 bytes), got {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        # Under a locale that is not UTF-8 (LC_ALL=C without Python's UTF-8 mode) Python decodes
        # argv and stdin with that locale's codec and surrogateescape, so UTF-8 text arrives as
        # escapes too: the bytes themselves say whether it was UTF-8.
        try:
            return os.fsencode(text).decode("utf-8")
        except (UnicodeEncodeError, UnicodeDecodeError):
            pass
        ch = ord(text[e.start])
        # surrogateescape maps an undecodable byte b to U+DC00 + b
        what_byte = f"byte 0x{ch - 0xDC00:02x}" if 0xDC80 <= ch <= 0xDCFF else f"U+{ch:04X}"
        raise LlamanbError(f"{what} is not valid UTF-8: {what_byte} at character {e.start}") from None
    return text


@dataclass
class ChatTokenizer:
    """encode / decode / apply_chat_template, and the ids that end a turn."""

    tok: object                                  # tokenizers.Tokenizer
    chat_template: str | None = None
    bos_token: str | None = None
    eos_token: str | None = None
    stop_ids: tuple[int, ...] = field(default_factory=tuple)

    @classmethod
    def from_dir(cls, d: Path, stop_ids=()) -> "ChatTokenizer":
        from tokenizers import Tokenizer

        d = Path(d)
        try:
            tok = Tokenizer.from_file(str(d / "tokenizer.json"))
        except Exception as e:  # tokenizers raises plain Exception subclasses
            raise LlamanbError(f"{d / 'tokenizer.json'}: cannot read tokenizer ({str(e)[:80]})") from None
        cfg = {}
        if (d / "tokenizer_config.json").exists():
            cfg = json.loads((d / "tokenizer_config.json").read_text())
        template = cfg.get("chat_template")
        if isinstance(template, list):            # [{"name": "default", "template": ...}, ...]
            template = next((t["template"] for t in template if t.get("name") == "default"), None)
        if template is None and (d / "chat_template.jinja").exists():
            template = (d / "chat_template.jinja").read_text()

        def token_str(v):
            return v.get("content") if isinstance(v, dict) else v

        return cls(tok, template, token_str(cfg.get("bos_token")), token_str(cfg.get("eos_token")),
                   tuple(stop_ids))

    @property
    def vocab_size(self) -> int:
        return self.tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str | bytes, add_special_tokens: bool = True,
               parse_special: bool = True) -> list[int]:
        """Token ids of `text`. parse_special (llama.cpp's name for it, llama_tokenize in
        include/llama.h): a special token's text, such as "<|im_end|>", becomes that token; with
        False it is ordinary text, encoded byte by byte like any other."""
        tok = self.tok if parse_special else self._plain_tok
        return tok.encode(as_text(text, "text"), add_special_tokens=add_special_tokens).ids

    @cached_property
    def _plain_tok(self):
        """A copy of the tokenizer that reads special tokens' text as text (its own object: the
        setting is the tokenizer's, not a call's, and the shared one must keep parsing them)."""
        from tokenizers import Tokenizer

        plain = Tokenizer.from_str(self.tok.to_str())
        plain.encode_special_tokens = True
        return plain

    @cached_property
    def _specials(self) -> dict[str, int]:
        """The special (control) tokens' texts and ids: what a message must not be able to write."""
        return {t.content: i for i, t in self.tok.get_added_tokens_decoder().items() if t.special}

    @cached_property
    def _special_re(self):
        import re

        names = sorted(self._specials, key=len, reverse=True)     # the longest match first
        return re.compile("|".join(map(re.escape, names))) if names else None

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def render_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        if not self.chat_template:
            raise LlamanbError("this model has no chat template; use plain-text mode (--raw)")
        from jinja2 import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(msg):
            raise LlamanbError(f"chat template: {msg}")

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        try:
            return env.from_string(self.chat_template).render(
                messages=messages, add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token or "", eos_token=self.eos_token or "")
        except TemplateError as e:
            raise LlamanbError(f"chat template failed: {e}") from None

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True) -> list[int]:
        """The conversation's ids: the markers the template writes (<|im_start|>, <|im_end|>, ...)
        are special tokens; what the messages say is text, even where it spells a marker, so a
        message cannot end its turn or open another one (a "system" turn, say).

        llama.cpp keeps its own markers special and the user's text plain where it can tell them
        apart: its interactive mode tokenizes --in-prefix and --in-suffix with parse_special true
        and the typed line with parse_special false, and llama_tokenize's tokenizer skips control
        tokens when parse_special is false (ggerganov/llama.cpp at c392e50,
        examples/main/main.cpp:856-858, src/llama-vocab.cpp:2155). Its conversation mode cannot
        tell them apart and parses the whole rendered turn ("TODO: one inconvenient of current
        chat template implementation is that we can't distinguish between user input and special
        tokens (prefix/postfix)", examples/main/main.cpp:855-857; tools/main/main.cpp at
        ggml-org/llama.cpp 0284db4 alike), as does transformers' apply_chat_template. Here the template is
        rendered with every marker a message spells stood in for by a private-use character, so
        the markers left are the template's.

        Where no message spells a marker (nearly always) the ids are the rendered text's, encoded
        as transformers and llama.cpp encode it. Where one does, the text between two of the
        template's markers that holds it is encoded with parse_special off."""
        text, forged = self._render_marking(messages, add_generation_prompt)
        enc = self.tok.encode(text, add_special_tokens=False)
        if not forged:
            return enc.ids
        special_ids = set(self._specials.values())
        out, start, run, plain = [], 0, [], False
        for i, (a, b) in zip(enc.ids, enc.offsets):
            if i in special_ids and a not in forged:           # the template's own marker
                out += self.encode(text[start:a], False, parse_special=False) if plain else run
                out.append(i)
                start, run, plain = b, [], False
            else:
                run.append(i)
                plain = plain or i in special_ids
        out += self.encode(text[start:], False, parse_special=False) if plain else run
        return out

    def _render_marking(self, messages: list[dict], add_generation_prompt: bool) -> tuple[str, set]:
        """(the rendered conversation, the character offsets in it where a special token's text
        comes from a message rather than from the template)."""
        text = self.render_chat(messages, add_generation_prompt)
        find = self._special_re
        texts = [m["content"] for m in messages
                 if isinstance(m, dict) and isinstance(m.get("content"), str)]
        spelled = sorted({x for t in texts for x in find.findall(t)}) if find else []
        if not spelled:
            return text, set()
        # each special token a message spells -> a private-use character found nowhere else
        seen = set((self.chat_template or "") + "".join(texts))
        free = (chr(c) for c in range(0xE000, 0xF900) if chr(c) not in seen)
        stand_in = dict(zip(spelled, free))
        if len(stand_in) < len(spelled):
            raise LlamanbError("the messages spell special tokens and use every private-use "
                               "character, so the tokens cannot be told apart from the template's")
        back = {c: name for name, c in stand_in.items()}
        masked = [{**m, "content": find.sub(lambda x: stand_in.get(x.group(), x.group()),
                                            m["content"])}
                  if isinstance(m, dict) and isinstance(m.get("content"), str) else m
                  for m in messages]
        parts, forged, n = [], set(), 0
        for ch in self.render_chat(masked, add_generation_prompt):
            if ch in back:
                forged.add(n)
                ch = back[ch]
            parts.append(ch)
            n += len(ch)
        if "".join(parts) != text:       # the template changed the message (cut it, say)
            raise LlamanbError(f"a message spells {spelled[0]!r}, a special token of this model, "
                               "and the chat template changes message text, so it cannot be kept "
                               "as text: leave it out")
        return text, forged

    def encode_prompt(self, text: str | bytes, chat: bool = True,
                      system: str | bytes | None = None) -> list[int]:
        text = as_text(text, "prompt")
        system = None if system is None else as_text(system, "system message")
        if not chat:
            return self.encode(text)
        msgs = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": text}]
        return self.apply_chat_template(msgs)
