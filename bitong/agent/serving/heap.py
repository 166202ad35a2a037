"""How the server's C heap treats the large blocks a stream allocates and frees (glibc only).

A StreamCall moves its bytes through objects of 64-256 KiB: each read of the
tool's pipe, each serialized message, and on a unix socket each read of the
SO_PEERCRED front's relay (agent/peercred.py). By default glibc maps blocks of
128 KiB and more with mmap and unmaps them when freed, and trims the top of the
heap when more than twice that is free, so the same few hundred KiB are handed
back to the kernel and faulted in again for every chunk: measured at ~140 page
faults and 3x the CPU per 256 KiB message, and 4.3 s of server CPU per GB
streamed over a unix socket against 2.6-2.8 s with the blocks kept (issue 13 §5).

:func:`keep_large_blocks` raises both thresholds for this process only (the
tools' processes start with the C library's defaults): blocks up to
``MMAP_THRESHOLD`` come from the heap and are reused, and up to
``TRIM_THRESHOLD`` of free heap top is kept rather than returned. The cost is
that much more resident memory after a burst, at most.
"""

from __future__ import annotations

import ctypes

__all__ = ["keep_large_blocks", "MMAP_THRESHOLD", "TRIM_THRESHOLD"]

MMAP_THRESHOLD = 1 << 20      # blocks below this come from the heap (glibc's default: 128 KiB, then adapting)
TRIM_THRESHOLD = 8 << 20      # free heap top kept up to this (default: twice the mmap threshold)
_M_TRIM_THRESHOLD = -1        # <malloc.h>
_M_MMAP_THRESHOLD = -3


def keep_large_blocks() -> bool:
    """Set both thresholds with ``mallopt``; False where the C library is not glibc (nothing changed)."""
    try:
        libc = ctypes.CDLL(None)          # the process's own symbols: no search for the library file
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    if not hasattr(libc, "gnu_get_libc_version"):   # glibc's alone: musl's mallopt does nothing
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
