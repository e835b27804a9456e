"""The chat of chapter 13 as ipywidgets: a text box, Send, Reset, and an output that grows token by
token while llamanb.engine.chat.Chat streams the answer.

    box = chat_widget(Chat(engine))      # display(box) in a notebook
    box.send("Hello")                    # what the Send button does (also for tests)

A widget outlives its kernel: Lab saves each widget's state in the notebook and, on reopening,
draws it again from that state with no kernel object behind it, so a slider still moves and a
button still clicks while nothing answers. `kernel_notice()` is a line that says so, shown only
then: ipywidgets' front end marks every view whose model has no live comm with the class
`jupyter-widgets-disconnected` (@jupyter-widgets/base, widget.ts: `_comm_live_update`), a model
restored from the notebook's saved state has none (base-manager, manager-base.ts: `set_state`
creates a comm only for a model the kernel still holds), and a kernel restart or shutdown sets
every model's `comm_live` to false (`disconnect`). The notice's own stylesheet hides it unless its
view carries that class. The check is the browser's, so it holds with no kernel at all.

ipywidgets is imported here only, so the package imports without it.
"""
from __future__ import annotations

KERNEL_GONE = ("This widget's kernel is gone, so it no longer responds: run the cells above "
               "(Run > Run All Cells) to bring it back.")
NOTICE_CLASS = "llamanb-kernel-gone"
# Hidden while the view's model is live; shown (one red line) once the front end marks it
# disconnected. ipywidgets' HTML view sets its value as innerHTML, so the <style> applies.
NOTICE_HTML = (f"<style>.{NOTICE_CLASS}:not(.jupyter-widgets-disconnected){{display:none !important}}"
               f".{NOTICE_CLASS}::before{{content:none !important}}</style>"
               f"<span style='color:#b00020'>&#9888; {KERNEL_GONE}</span>")


def kernel_notice():
    """An HTML widget that shows KERNEL_GONE only where its kernel is gone (see above)."""
    from ipywidgets import HTML

    notice = HTML(value=NOTICE_HTML)
    notice.add_class(NOTICE_CLASS)
    return notice


# The widget's output is drawn in Lab's output column, which breaks a longer line mid-word
# (tests/lab/test_output_width.py: about 120 characters); the box's border and padding take a few.
COLUMNS = 110


class _Wrapped:
    """Text streamed into an Output in pieces (a token at a time, cut anywhere), broken at a space
    before a line outgrows `columns`, the next line indented under the speaker's text. Only the
    display breaks: the model's text is written unchanged otherwise. A word is written once it is
    whole (the next space or newline, or `flush`), so that a break never falls inside it."""

    def __init__(self, write, columns: int = COLUMNS):
        self.write, self.columns = write, columns
        self.col = self.indent = self.gap = 0
        self.word = ""

    def line(self, who: str, text: str = "") -> None:
        """Start a line `who> ` and stream `text` after it; continuation lines indent under it."""
        self.flush()
        self.indent = len(who) + 2
        self.write(f"{who}> ")
        self.col = self.indent
        self.piece(text)

    def piece(self, text: str) -> None:
        for ch in text:
            if ch not in " \n":
                self.word += ch
                continue
            self._put_word()
            if ch == " ":
                self.gap += 1
            else:                                 # the model's own line break
                self.write(" " * self.gap + "\n")
                self.col, self.gap = 0, 0

    def flush(self) -> None:
        self._put_word()
        if self.gap:
            self.write(" " * self.gap)
            self.col, self.gap = self.col + self.gap, 0

    def _put_word(self) -> None:
        if not self.word:
            return
        if self.col + self.gap + len(self.word) > self.columns and self.col > self.indent:
            self.write("\n" + " " * self.indent + self.word)
            self.col = self.indent + len(self.word)
        else:
            self.write(" " * self.gap + self.word)
            self.col += self.gap + len(self.word)
        self.word, self.gap = "", 0


def chat_widget(chat):
    from ipywidgets import HTML, Button, HBox, Layout, Output, Text, VBox

    text = Text(placeholder="Ask something, then press Send", layout=Layout(width="60%"))
    send, reset = Button(description="Send", button_style="primary"), Button(description="Reset")
    out = Output(layout=Layout(border="1px solid #ccc", min_height="80px", padding="4px"))
    status = HTML(value=f"<i>{chat.engine.backend.description}</i>")

    def on_send(_=None, message: str | None = None):
        message = text.value if message is None else message
        if not message.strip():
            return
        text.value = ""
        shown = _Wrapped(out.append_stdout)
        shown.line("you", message)
        shown.flush()
        out.append_stdout("\n")
        shown.line("assistant")
        try:
            turn = chat.send(message, on_token=lambda t, piece: shown.piece(piece))
        except Exception as e:                       # shown in the widget, not raised away
            shown.flush()
            out.append_stdout(f"\n({type(e).__name__}: {e})\n")
            return
        shown.flush()
        out.append_stdout("\n")
        s = chat.stats()
        extra = (f", {s['calls']} device calls, {s['bytes_to_device']:,} B to / "
                 f"{s['bytes_from_device']:,} B from the device" if "calls" in s else "")
        status.value = (f"<i>{chat.engine.backend.description}</i><br>turn {s['turns']}: "
                        f"{len(turn.ids)} tokens, prefilled {turn.prefilled} new positions, reused "
                        f"{turn.reused} from the cache; context {s['context_used']}/{s['context']}"
                        f"{extra}")

    def on_reset(_=None):
        chat.reset()
        out.outputs = ()
        status.value = f"<i>{chat.engine.backend.description}</i><br>conversation reset"

    send.on_click(on_send)
    reset.on_click(on_reset)
    box = VBox([kernel_notice(), HBox([text, send, reset]), out, status])
    box.send, box.reset, box.out, box.status = (lambda m: on_send(message=m)), on_reset, out, status
    box.text, box.send_button, box.reset_button = text, send, reset
    return box
