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
    box = VBox([kernel_notice(), HBox([text, send, reset]), out, status])
    box.send, box.reset, box.out, box.status = (lambda m: on_send(message=m)), on_reset, out, status
    box.text, box.send_button, box.reset_button = text, send, reset
    return box
