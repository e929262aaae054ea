"""Host pages on the GPU: paged training data streamed through two device buffers, or read where
it lies by one kernel for every page (page-locked memory is mapped into the device's address
space)."""
from __future__ import annotations

import numpy as np

from .arrays import on_gpu
from .base import check_page_walk, check_scatter, row_word


class StreamedPages:
    """Page-locked host pages read on the GPU through two device buffers.

    ``get(i)`` returns page i in a device buffer (a view of the page's shape and dtype) and
    starts copying the next page (i + 1, after the last one the first: levels and trees read the
    pages in order) into the other buffer on a stream of its own, so that the copy overlaps the
    kernels queued on the current stream that read page i. A copy into a buffer first waits for
    the work queued before it (which may still read the buffer's previous page); the current
    stream waits for a page's copy before its kernels. A page read out of order is copied then.
    """

    def __init__(self, cupy, pages: list):
        self._cupy, self.pages = cupy, pages
        size = max((int(p.nbytes) for p in pages), default=0)
        self._buffers = [cupy.empty(max(size, 1), dtype=np.uint8) for _ in range(2)]
        self._held = [-1, -1]  # the page in each buffer (or on its way there)
        self._ready = [None, None]  # per buffer: the event after its copy
        self._last = 1  # the buffer of the page asked for last
        self._stream = cupy.cuda.Stream(non_blocking=True)
        self.bytes_copied = 0

    def get(self, i: int):
        buffer = self._held.index(i) if i in self._held else self._load(i, 1 - self._last)
        self._last = buffer
        self._cupy.cuda.get_current_stream().wait_event(self._ready[buffer])
        following = (i + 1) % len(self.pages)
        if following not in self._held:
            self._load(following, 1 - buffer)
        page = self.pages[i]
        return self._buffers[buffer][: page.nbytes].view(page.dtype).reshape(page.shape)

    def _load(self, i: int, buffer: int) -> int:
        runtime = self._cupy.cuda.runtime
        free = self._cupy.cuda.get_current_stream().record()  # readers of the old page queued
        self._stream.wait_event(free)
        page = self.pages[i]
        if page.nbytes:
            runtime.memcpyAsync(self._buffers[buffer].data.ptr, page.ctypes.data, page.nbytes,
                                runtime.memcpyHostToDevice, self._stream.ptr)
        self._ready[buffer] = self._stream.record()
        self._held[buffer] = i
        self.bytes_copied += int(page.nbytes)
        return buffer


def mapped_addresses(kernels, pages: list):
    """(n_pages,) uint64 host array of the pages' device addresses (``kernels._mapped_address``)
    where every page is C-contiguous page-locked mapped host memory, else None."""
    addresses = np.zeros(len(pages), dtype=np.uint64)
    for i, page in enumerate(pages):
        address = kernels._mapped_address(page) if isinstance(page, np.ndarray) and \
            page.flags.c_contiguous and page.size else None
        if address is None and page.size:
            return None
        addresses[i] = address or 0
    return addresses


def page_starts(pages: list) -> np.ndarray:
    """(n_pages + 1,) int64: page p holds rows start[p]..start[p + 1] of the pages in order."""
    return np.concatenate([[0], np.cumsum([page.shape[0] for page in pages])]).astype(np.int64)


def scatter_rows(kernels, pages: list, places: list, room: int, out) -> bool:
    """``Backend.scatter_page_rows`` with every page read where it lies, in one launch: False
    (nothing done) where a page is not mapped page-locked memory or a place column is not
    C-contiguous."""
    for page, place in zip(pages, places, strict=True):
        check_scatter(page, place, room, out)
    addresses = mapped_addresses(kernels, pages)
    if addresses is None:
        return False
    if any(len(place) and not place.flags.c_contiguous for place in places):
        return False  # (the kernel reads each page's places as one run of int64)
    start = page_starts(pages)
    if start[-1] == 0:
        return True
    word = row_word(pages[0])  # (every page is out's width and dtype: check_scatter)
    place_addresses = np.array([place.data.ptr if len(place) else 0 for place in places],
                               dtype=np.uint64)
    tables = kernels._upload_small((addresses, np.uint64), (place_addresses, np.uint64),
                                   (start, np.int64))
    kernels._scatter_host_rows(*tables, int(start[-1]), room, out.view(word))
    return True


def predict_rows(kernels, pages: list, n_features: int, arrays: list, outs: list,
                 categories: tuple) -> bool:
    """``Backend.predict_pages_binned`` with every page read where it lies, in one launch: False
    (nothing done) where a page is not mapped page-locked memory, a margin matrix is not on the
    device, the pages differ in width or dtype or the margin matrices in strides. Rows too wide
    to stage (over 1 KB) are walked a launch a page where they lie, into C-contiguous margins
    (a walk reads a few bytes of each such row: less than copying it whole)."""
    check_page_walk(pages, n_features, outs)
    addresses = mapped_addresses(kernels, pages)
    if addresses is None or not pages or not all(on_gpu(o) for o in outs):
        return False
    first = pages[0]
    filled = [o for o in outs if o.size]  # (an empty array's strides may be any)
    if any(p.shape[1] != first.shape[1] or p.dtype != first.dtype for p in pages) or \
            any(o.strides != filled[0].strides for o in filled):
        return False
    if not filled:
        return True
    row_bytes = first.shape[1] * first.itemsize
    if kernels._staging_threads(row_bytes) is None:
        if not all(o.flags.c_contiguous for o in filled):
            return False
        for page, address, out in zip(pages, addresses, outs):
            if page.shape[0]:
                kernels.predict_margins_binned(
                    kernels._mapped_view(int(address), page)[:, :n_features], *arrays, out,
                    *categories)
        return True
    start = page_starts(pages)
    out_addresses = np.array([o.data.ptr if o.size else 0 for o in outs], dtype=np.uint64)
    tables = kernels._upload_small((addresses, np.uint64), (start, np.int64),
                                   (out_addresses, np.uint64))
    strides = tuple(s // 8 for s in filled[0].strides)
    kernels._walk_host_pages(tables[0], tables[1], int(start[-1]), row_bytes, first.itemsize,
                             *arrays, tables[2], strides, *categories)
    return True
