"""The chat widget's transcript fits Lab's output column: a streamed answer is broken at a space
before COLUMNS (Lab itself would break it mid-word), and the tokens are written unchanged."""
from __future__ import annotations

import pytest

ANSWER = ("A language model needs a KV cache (Key Value Cache) to store and retrieve data efficiently, "
          "especially when dealing with long conversations:\nevery new token attends to all the keys and "
          "values before it, and recomputing them at every step would cost quadratic time in the length "
          "of the text. A_single_word_longer_than_the_column_" + "x" * 120 + " stays whole.")


class FakeChat:
    """What chat_widget uses of llamanb.engine.chat.Chat: send(text, on_token), stats(), reset()."""

    class engine:
        class backend:
            description = "a stand-in engine"

    def send(self, message, on_token=None):
        pieces = [ANSWER[i:i + 3] for i in range(0, len(ANSWER), 3)]     # tokens cut anywhere
        for p in pieces:
            on_token(0, p)

        class Turn:
            ids, prefilled, reused = list(range(len(pieces))), 5, 0
        return Turn()

    def stats(self):
        return {"turns": 1, "context_used": 10, "context": 100}

    def reset(self):
        pass


def test_streamed_answer_is_broken_at_spaces_within_the_column():
    pytest.importorskip("ipywidgets")
    from llamanb.course.widgets import COLUMNS, chat_widget

    box = chat_widget(FakeChat())
    question = "please explain " * 12
    box.send(question.strip())
    text = "".join(o.get("text", "") for o in box.out.outputs)
    lines = text.splitlines()
    long_word = next(w for w in ANSWER.split() if len(w) > COLUMNS)
    assert all(len(line) <= COLUMNS for line in lines if long_word not in line), lines
    assert any(long_word in line for line in lines)                  # never cut inside a word
    you = [ln for ln in lines[:lines.index(next(ln for ln in lines if ln.startswith("assistant> ")))]]
    assert len(you) > 1 and you[0].startswith("you> please") and you[1].startswith(" " * 5 + "please")
    # undo the display's breaks: the model's text comes back exactly, its own newline kept
    shown = text.split("assistant> ", 1)[1].rstrip("\n")
    assert shown.replace("\n" + " " * len("assistant> "), " ") == ANSWER
    assert " ".join(ln.strip() for ln in you) == "you> " + question.strip()
