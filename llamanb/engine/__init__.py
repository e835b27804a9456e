"""How a Llama runs: a Step of rows (step), the KV stores (kv/), the Backend seam every track
plugs into (backend, registry), the numpy backend, the Engine that drives them, sampling,
generate and chat."""
from llamanb.engine.engine import Engine, pad_to

__all__ = ["Engine", "pad_to"]
