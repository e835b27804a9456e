"""KV caches: one protocol (kv.base.KVStore), several storages behind it."""
from .contiguous import KVCache

__all__ = ["KVCache"]
