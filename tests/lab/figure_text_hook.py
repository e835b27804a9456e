"""An IPython startup file for the kernels `tests/lab/check_widgets.py` starts (never the reader's):
every PNG matplotlib writes (the inline backend's figures and the widgets' own `fig.savefig`)
carries, as a PNG text chunk, the height in pixels of the smallest text drawn into it, at the
image's natural size: font size in points x dpi / 72. The browser test reads the chunk back from
the image Lab shows and scales it by the drawn width over the natural width, so a label is
measured as the reader sees it.
"""
import matplotlib.text
from matplotlib.backend_bases import FigureCanvasBase

KEY = "llamanb-min-text-px"
_drawn: list[float] = []
_draw_text, _print_figure = matplotlib.text.Text.draw, FigureCanvasBase.print_figure


def _text_draw(self, renderer):
    if self.get_visible() and self.get_text().strip() and getattr(renderer, "dpi", None):
        _drawn.append(self.get_fontsize() * renderer.dpi / 72)
    return _draw_text(self, renderer)


def _print_figure_with_text_size(self, filename, *args, **kwargs):
    fmt = str(kwargs.get("format") or getattr(filename, "name", filename) or "").lower()
    if not fmt.endswith("png"):
        return _print_figure(self, filename, *args, **kwargs)
    meta = dict(kwargs.pop("metadata", None) or {})     # written after the draw: filled below
    _drawn.clear()
    orig_draw = self.figure.draw

    def draw_then_record(renderer):
        out = orig_draw(renderer)
        if _drawn:
            meta[KEY] = f"{min(_drawn):.2f}"
        return out
    self.figure.draw = draw_then_record
    try:
        return _print_figure(self, filename, *args, metadata=meta, **kwargs)
    finally:
        del self.figure.draw


matplotlib.text.Text.draw = _text_draw
FigureCanvasBase.print_figure = _print_figure_with_text_size
