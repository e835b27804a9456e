"""The chat of chapter 13 as ipywidgets: a text box, Send, Reset, and an output that grows token by
token while llamanb.engine.chat.Chat streams the answer.

    box = chat_widget(Chat(engine))      # display(box) in a notebook
    box.send("Hello")                    # what the Send button does (also for tests)

ipywidgets is imported here only, so the package imports without it.
"""
from __future__ import annotations


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
        out.append_stdout(f"you> {message}\nassistant> ")
        try:
            turn = chat.send(message, on_token=lambda t, piece: out.append_stdout(piece))
        except Exception as e:                       # shown in the widget, not raised away
            out.append_stdout(f"\n({type(e).__name__}: {e})\n")
            return
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
    box = VBox([HBox([text, send, reset]), out, status])
    box.send, box.reset, box.out, box.status = (lambda m: on_send(message=m)), on_reset, out, status
    box.text, box.send_button, box.reset_button = text, send, reset
    return box
