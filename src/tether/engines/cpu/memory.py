"""Keep freed heap memory in the process, so that a training loop's tensors reuse warm pages.

Every PPO step allocates and frees the same large CPU tensors: activations, their gradients,
logits (0.1-8 MB each at the benchmark's sizes). glibc's malloc serves a block of at least
``M_MMAP_THRESHOLD`` bytes (128 KiB at start, raised as such blocks are freed) with a fresh
``mmap`` and unmaps it on ``free``, and gives the top of its heaps back to the kernel once
more than ``M_TRIM_THRESHOLD`` bytes are free there. The next allocation of that size then
gets new pages, and the kernel faults each 4 KiB page in (and zeroes it) on first touch. At
the benchmark's small size that is 50-190 thousand page faults per PPO iteration, ~2.5 µs
each in the VM where it was measured: a few tenths of a second per iteration spent in the
kernel, in both of the update's threads.

:func:`retain_freed_memory` sets both thresholds once for the process (glibc ``mallopt``):
blocks under 32 MiB (glibc's ceiling for the mmap threshold on 64-bit) come from the heap,
and up to 1 GiB of free heap stays mapped. Freed tensors' pages are then reused warm. The
cost is that the process keeps its peak heap after it needs it; the peak itself is
unchanged. Off glibc (macOS, musl, Windows) it does nothing; it also leaves the allocator
alone when the user tuned it through glibc's ``MALLOC_*_`` environment variables. With
jemalloc or tcmalloc preloaded, glibc's malloc is not the one in use and the call changes
nothing that matters.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform
import sys

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's largest mmap threshold on 64-bit (HEAP_MAX_SIZE / 2)
TRIM_THRESHOLD = 1 << 30
USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")

# Process-wide by nature: glibc's malloc settings belong to the process, applied once.
_applied = False


def glibc_mallopt():
    """glibc's ``mallopt`` function, or None when this process does not run on glibc."""
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return None


def retain_freed_memory() -> bool:
    """Make glibc's malloc keep freed memory for reuse (see the module docstring).

    Returns whether the allocator is now configured so (True again on later calls). Returns
    False, changing nothing, off glibc or when one of :data:`USER_SETTINGS` is set.
    """
    global _applied
    if _applied:
        return True
    user = [name for name in USER_SETTINGS if name in os.environ]
    if user:
        log.debug("cpu.retain_memory: %s set in the environment; malloc left as configured.", ", ".join(user))
        return False
    mallopt = glibc_mallopt()
    if mallopt is None:
        return False
    _applied = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    if not _applied:
        log.warning("cpu.retain_memory: glibc's mallopt refused the thresholds; malloc left as it was.")
    return _applied
