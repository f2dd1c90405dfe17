"""The weights a short pass streams, moved into one block of memory in the order the pass reads them, on 2 MB pages
where the OS grants them (Linux: MADV_HUGEPAGE).

Why: a one-token pass of the 0.5B draft model reads 224 MB in ~100 kernel calls, most of them under 3 MB. In 4 KB
pages each call starts cold: the hardware prefetchers stop at every page boundary and a page walk waits on each TLB
miss, so the small calls (q/k/v, o) streamed at about half the bandwidth the large ones reached. Moved here, the
draft step and the target's one-token pass measured faster side by side in one process (docs/performance.md,
"Drafting modes and switches"). The arithmetic is untouched: every tensor is the same bytes, viewed at its new address.
"""
from __future__ import annotations

import ctypes
import logging
import mmap
import sys

import torch

log = logging.getLogger(__name__)

HUGE_PAGE = 2 << 20
ALIGN = 64  # each tensor's start: the kernels' vector loads


def move_into_arena(owners: list, names: tuple[str, ...] = ("packed", "d", "m")) -> int:
    """Copy the storages behind each owner's tensor attributes `names` (in the owners' order, each storage once)
    into one arena, and point every such attribute at its bytes there: views of one storage (a fused projection and
    the modules that view it, engine/weights/lean_step.py) stay views of one copy. The old storages are freed once
    nothing else holds them. Returns the arena's size in bytes (0: nothing to move)."""
    places: dict[int, int] = {}  # storage address -> offset in the arena
    storages = []
    size = 0
    for owner in owners:
        for name in names:
            tensor = getattr(owner, name)
            storage = tensor.untyped_storage()
            if tensor.device.type != "cpu" or storage.data_ptr() in places:
                continue
            places[storage.data_ptr()] = size
            storages.append(storage)
            size += -(-storage.nbytes() // ALIGN) * ALIGN
    if not size:
        return 0
    arena = allocate(size)
    for storage in storages:
        offset = places[storage.data_ptr()]
        arena[offset:offset + storage.nbytes()].copy_(torch.empty(0, dtype=torch.uint8).set_(storage))
    for owner in owners:
        for name in names:
            tensor = getattr(owner, name)
            offset = places.get(tensor.untyped_storage().data_ptr())
            if offset is None:
                continue
            typed = arena[offset:offset + tensor.untyped_storage().nbytes()].view(tensor.dtype)
            # as_strided's offset counts from the start of the arena's own storage, not of `typed`
            moved = typed.as_strided(tensor.shape, tensor.stride(), typed.storage_offset() + tensor.storage_offset())
            setattr(owner, name, moved)
    return size


def allocate(size: int) -> torch.Tensor:
    """`size` bytes starting on a 2 MB boundary, asked for 2 MB pages where the platform has them; a plain tensor
    elsewhere (the order of the weights alone is kept)."""
    if not sys.platform.startswith("linux"):
        return torch.empty(size, dtype=torch.uint8)
    block = mmap.mmap(-1, size + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        block.madvise(mmap.MADV_HUGEPAGE)
    except (AttributeError, OSError) as exc:  # an old kernel, THP compiled out: 4 KB pages, still in pass order
        log.debug("no 2 MB pages for the weights: %s", exc)
    whole = torch.frombuffer(block, dtype=torch.uint8)  # holds `block` alive as long as a view of it lives
    start = -whole.data_ptr() % HUGE_PAGE
    return whole[start:start + size]


def return_freed_memory() -> None:
    """Hand the heap's free pages back to the OS. glibc keeps the moved weights' old pages in its heap, where they
    count in the process's RSS (~0.9 GB more for the default pair on 2 cores) until something else is allocated."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (AttributeError, OSError):  # not glibc (musl has no malloc_trim)
        pass
