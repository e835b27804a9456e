"""Moved to llamanb.platform.locks (the C++ build cache, a platform module, locks its temporaries
too); this name stays for the io modules that import it."""
from llamanb.platform.locks import AVAILABLE, fcntl, lock_fd, lock_open_file, locked  # noqa: F401
