"""KV caches: one protocol (kv.base.KVStore), several storages behind it."""
from llamanb.engine.kv.contiguous import KVCache

__all__ = ["KVCache"]
