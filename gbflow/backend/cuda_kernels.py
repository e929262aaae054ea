"""CuPy twins of every kernel: the CUDA sources in ``cuda/kernels.cu`` (dense columns) and
``cuda/sparse.cu`` (sparse columns), compiled at first use.

Same names, signatures and results as ``numpy_kernels`` (integers bit for bit, float64 by the same
IEEE operations in the same order: the module is compiled with ``--fmad=false``), on CuPy arrays.
Segment arrays (``seg_start``/``seg_count``) may be host or device arrays: the host turns them
into a work list of thread blocks, so a large node gets many blocks and an empty node none.

Tuning knobs (environment, read once): ``GBFLOW_CUDA_SHARED_BYTES`` caps the shared memory of one
histogram block (default: 100 KB, two blocks per multiprocessor); ``GBFLOW_CUDA_FUSED_MAX_GROUPS``
is the most feature groups for which a level's partition also builds the children's histograms
(default 2; wider data gets a second pass).
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import os
import pathlib
import threading

import cupy as cp
import numpy as np

from .. import _dtypes
from .arrays import to_host
from .common import (
    aligned_slots,
    categorical_width,
    check_bounds,
    check_column_out,
    check_feature_mask,
    check_sibling_shapes,
    check_side_map,
    feature_widths,
    gradient_out,
    integer_scalar,
    key_buckets_with,
    occupied_keys_with,
    packed_empty,
    padded_width,
    prediction_keys_with,
    sigmoid_with,
    work_list_rows,
)
from .compiling import compiling
from .losses import check_loss_arguments, logistic_gradients_with, softmax_gradients_with
from .sketch_tallies import check_sketch_arguments, sketch_counts_with, sketch_selected_with

_CUDA_DIR = pathlib.Path(__file__).with_name("cuda")
_THREADS = 256
_HIST_THREADS = 1024
_MIN_ROWS_PER_BLOCK = 2048
# Up to this many shared-memory feature groups, a level's partition builds the children's
# histograms in the same pass; above it (wide data), in a second pass over the moved rows.
_FUSED_MAX_GROUPS = int(os.environ.get("GBFLOW_CUDA_FUSED_MAX_GROUPS", 2))


@functools.lru_cache(maxsize=None)
def _source(file_name: str) -> str:
    """A CUDA source with ``common.cuh`` pasted in place of its #include: CuPy's compile cache is
    keyed on the source text, so an edit of the header must change the text it sees."""
    text = (_CUDA_DIR / file_name).read_text()
    header = (_CUDA_DIR / "common.cuh").read_text()
    return text.replace('#include "common.cuh"', header)


def _compile(file_name: str, name: str, bin_itemsize: int, feature_itemsize: int | None = None):
    """``name`` of ``file_name`` for one bin width and, for sparse.cu, one width of the sparse
    store's feature ids (FEATURE_T: -DFEATURE_T=short for 2, int for 4)."""
    options = ("--std=c++17", "--fmad=false",
               f"-DBIN_T={'unsigned char' if bin_itemsize == 1 else 'unsigned short'}")
    if feature_itemsize is not None:
        options += (f"-DFEATURE_T={'short' if feature_itemsize == 2 else 'int'}",)
    return _raw_kernel(_source(file_name), name, options)


_COMPILE_NOTE = ("gbflow: compiling the CUDA kernels for this GPU (first use after installing or "
                 "upgrading; about 5-20 s, cached on disk by CuPy for later runs; `gbflow compile "
                 "--device cuda` does it ahead)")


def _raw_kernel(code: str, name: str, options: tuple):
    """``cp.RawKernel`` compiled for the current device now, not at its first launch, and timed
    as compilation (``compiling``: outside the stage timers, announced once compiles have taken
    a second; ``watch_cupy``'s wrapper counts the same call, nested, where CuPy has it). Kernels
    sharing a source and options share one NVRTC compile."""
    kernel = cp.RawKernel(code, name, options=options)
    with compiling(_COMPILE_NOTE):
        kernel.compile()
    return kernel


# Host pages read where they lie (paged training's gathered samples).
_HOST_MEMORY = 1  # cudaMemoryTypeHost: page-locked host memory


def _mapped_address(array) -> int | None:
    """The device's address of host ``array``'s data where its memory is page-locked and
    mapped into the device's address space (``to_page``'s is: unified addressing), else None."""
    try:
        attributes = cp.cuda.runtime.pointerGetAttributes(array.ctypes.data)
    except cp.cuda.runtime.CUDARuntimeError:
        return None
    if attributes.type != _HOST_MEMORY or not attributes.devicePointer:
        return None
    return int(attributes.devicePointer)


_SCATTER_ROWS = {}


def _scatter_host_rows(page_address, place_address, page_start, n_rows: int, room: int,
                       words) -> None:
    """Row i of host page p (at device address ``page_address[p]``, its rows as ``words``'
    dtype, ``words.shape[1]`` of them a row; ``page_start``: (n_pages + 1,) int64, page p
    holding the launch's rows page_start[p]..page_start[p + 1], n_rows of them) with
    ``0 <= place[i] < room`` (``place``: the int64 column at device address
    ``place_address[p]``) copied to row ``place[i]`` of ``words`` ((room + 1, width) on the
    device), read where they lie (``Backend.scatter_page_rows``): every page in one launch, one
    thread a word of a row, a kept row's words read together. Tables: uint64/int64 device
    arrays."""
    if "kernel" not in _SCATTER_ROWS:
        _SCATTER_ROWS["kernel"] = cp.ElementwiseKernel(
            "raw uint64 page_address, raw uint64 place_address, raw int64 page_start, "
            "int32 n_pages, int64 room, int64 width", "raw T out",
            """long long row = i / width;
               int lo = 0, hi = n_pages - 1;
               while (lo < hi) {  // the last page starting at or before the row
                   int mid = (lo + hi + 1) / 2;
                   if (page_start[mid] <= row) lo = mid; else hi = mid - 1;
               }
               long long local = row - page_start[lo];
               long long at = ((const long long*)place_address[lo])[local];
               if (at >= 0 && at < room)
                   out[at * width + i % width] =
                       ((const T*)page_address[lo])[local * width + i % width];""",
            "gbflow_scatter_page_rows")
    width = words.shape[1]
    _SCATTER_ROWS["kernel"](page_address, place_address, page_start,
                            np.int32(len(page_address)), np.int64(room), np.int64(width), words,
                            size=n_rows * width)


def watch_cupy() -> None:
    """Count CuPy's own compiles (its element-wise and reduction kernels, compiled at their
    first use per dtype: seconds on a fresh machine) as compilation too, under the same
    announcement, by wrapping ``cupy.cuda.compiler._compile_module_with_cache``, through which
    CuPy compiles or loads every module. That function is CuPy's internal: where it is absent,
    CuPy's compiles stay in the stages' time. Side effect: the wrapper, once per process."""
    from cupy.cuda import compiler
    original = getattr(compiler, "_compile_module_with_cache", None)
    if original is None or getattr(original, "gbflow_counted", False):
        return

    @functools.wraps(original)
    def counted(*args, **kwargs):
        with compiling(_COMPILE_NOTE):
            return original(*args, **kwargs)

    counted.gbflow_counted = True
    compiler._compile_module_with_cache = counted


@functools.lru_cache(maxsize=None)
def _kernel(name: str, bin_itemsize: int):
    """A kernel of kernels.cu (dense columns) for one bin width."""
    return _compile("kernels.cu", name, bin_itemsize)


@functools.lru_cache(maxsize=None)
def _sparse_kernel(name: str, bin_itemsize: int, feature_itemsize: int = 4):
    """A kernel of sparse.cu (sparse columns) for one bin width and one width of the store's
    entry_feature ids (2: int16, 4: int32). Kernels that do not read the store's ids take the
    default, so each of them is compiled once per bin width, not once per id width too."""
    return _compile("sparse.cu", name, bin_itemsize, feature_itemsize)


@functools.lru_cache(maxsize=None)
def _device_limits(device_id: int) -> tuple[int, int]:
    """(multiprocessors, shared bytes one block may use) of the current device."""
    attributes = cp.cuda.Device(device_id).attributes
    optin = attributes.get("MaxSharedMemoryPerBlockOptin", 48 * 1024)
    wanted = int(os.environ.get("GBFLOW_CUDA_SHARED_BYTES", 100 * 1024))
    return attributes["MultiProcessorCount"], min(optin, wanted)


def _limits():
    return _device_limits(cp.cuda.Device().id)


def _rows_per_block(total_rows: int) -> int:
    n_sm, _ = _limits()
    return max(_MIN_ROWS_PER_BLOCK, -(-total_rows // (2 * n_sm)))


# the last work list made, by its segments: a level's column gather, partition and sparse
# histograms deal the same segments to blocks (a few NumPy calls each time)
_last_work: list = [None]


def work_list(seg_start, seg_count, rows_per_block: int | None = None) -> np.ndarray:
    """(n_blocks, 5) int64 host array: per block [node, begin, end, first block of node, start]
    (``common.work_list_rows``, the layout the level plans build on the device), by
    default with two blocks per multiprocessor over the listed rows. The array may be the one
    an earlier call returned for the same segments: callers read it, never write it."""
    start = to_host(seg_start).astype(np.int64)
    count = to_host(seg_count).astype(np.int64)
    if rows_per_block is None:
        rows_per_block = _rows_per_block(int(count.sum()))
    key = (start.tobytes(), count.tobytes(), rows_per_block)
    last = _last_work[0]
    if last is not None and last[0] == key:
        return last[1]
    work = work_list_rows(start, count, rows_per_block)
    work.flags.writeable = False
    _last_work[0] = (key, work)
    return work


@dataclasses.dataclass(frozen=True)
class _SharedGroups:
    """Feature groups of the shared-memory histogram kernels (see ``group_words`` in
    kernels.cu): group g holds features group_first[g] .. group_first[g + 1], each as wide as its
    own bins; ``group_width`` the bins of a group's features where all are equal (else 0);
    ``counter_start`` numbers every feature's (bin, component) counters one feature after the
    other. Host arrays; ``args()`` gives them on the device."""

    n_groups: int
    most_bytes: int  # the shared memory of the largest group
    group_first: np.ndarray  # (n_groups + 1,) int32
    group_width: np.ndarray  # (n_groups,) int32
    counter_start: np.ndarray  # (F + 1,) int64

    def args(self) -> tuple:
        return (_device_constant(self.group_first), _device_constant(self.group_width),
                _device_constant(self.counter_start))

    @property
    def equal_widths(self) -> bool:
        """Whether every group's features are equally wide: the kernels' ``_equal`` versions
        (no table read in their inner loops) serve them."""
        return bool(self.group_width.all())

    def kernel(self, name: str, bin_itemsize: int):
        """The shared-memory kernel ``name`` compiled for these groups (``equal_widths``)."""
        return _kernel(name + "_equal" if self.equal_widths else name, bin_itemsize)


def _shared_groups(n_features: int, n_bins: int, n_value_bins,
                   reserved_bytes: int) -> _SharedGroups | None:
    """The histograms' feature groups for a block's shared memory less ``reserved_bytes``:
    consecutive features while their counters fit; None where one feature's do not (the
    kernels then add into global memory)."""
    widths = feature_widths(None if n_value_bins is None else to_host(n_value_bins),
                            n_features, n_bins)
    return _packed_groups(widths.tobytes(), _limits()[1] - reserved_bytes)


@functools.lru_cache(maxsize=64)
def _packed_groups(widths_bytes: bytes, room: int) -> _SharedGroups | None:
    """Consecutive features in the fewest groups whose counters fit in ``room`` bytes, the
    largest group as few features as can be (a block's time goes with its features: each of
    its rows adds one pair a feature; equal widths give groups of equal sizes)."""
    widths = np.frombuffer(widths_bytes, dtype=np.int64)
    nbytes = 4 * (4 * widths + 1)  # a feature's words: 4 a bin and one of padding
    if len(widths) == 0 or nbytes.max() > room:
        return None
    ends = np.concatenate([[0], np.cumsum(nbytes)])

    def firsts(most_features: int) -> list:
        first = [0]
        while first[-1] < len(widths):
            fits = int(np.searchsorted(ends, ends[first[-1]] + room, side="right")) - 1
            first.append(min(fits, first[-1] + most_features))
        return first
    n_groups = len(firsts(len(widths))) - 1
    low, high = -(-len(widths) // n_groups), len(widths)  # the fewest features a group can hold
    while low < high:
        middle = (low + high) // 2
        if len(firsts(middle)) - 1 <= n_groups:
            high = middle
        else:
            low = middle + 1
    group_first = np.array(firsts(low), dtype=np.int32)
    group_width = np.array([widths[a] if (widths[a:b] == widths[a]).all() else 0
                            for a, b in zip(group_first[:-1], group_first[1:])], dtype=np.int32)
    counter_start = np.concatenate([[0], np.cumsum(2 * widths)]).astype(np.int64)
    return _SharedGroups(len(group_first) - 1, int(np.diff(ends[group_first]).max()),
                         group_first, group_width, counter_start)


def _launch_shared(kernel, grid, threads, shared_bytes, args):
    # a block may take 48 KB of shared memory without asking, static and dynamic together: ask
    # for the dynamic bytes above 47 KB (the kernels' static shared memory is under 1 KB)
    if shared_bytes > 47 * 1024 and kernel.max_dynamic_shared_size_bytes < shared_bytes:
        kernel.max_dynamic_shared_size_bytes = shared_bytes
    kernel(grid, (threads,), args, shared_mem=shared_bytes)


def _upload(work: np.ndarray, *arrays) -> list:
    """The work list and small (array, dtype) pairs on the device: the host ones in one
    host-to-device copy (each copy costs host time, and a level has up to seven small arrays),
    device ones as they are (converted to their dtype). Returns CuPy arrays (the uploaded ones
    views of one allocation, 8-byte aligned)."""
    pairs = ((work, np.int64),) + arrays
    on_device = [isinstance(a, cp.ndarray) for a, _ in pairs]
    parts = [np.ascontiguousarray(a, dtype=d) for (a, d), done in zip(pairs, on_device)
             if not done]
    offsets, size = aligned_slots([p.nbytes for p in parts])
    image = np.zeros(max(size, 8), dtype=np.uint8)
    for p, o in zip(parts, offsets):
        image[o: o + p.nbytes] = p.reshape(-1).view(np.uint8)
    device = cp.asarray(image) if parts else None
    uploaded = iter([cp.ndarray(p.shape, dtype=p.dtype, memptr=device.data + o)
                     for p, o in zip(parts, offsets)])
    return [cp.asarray(a, dtype=d) if done else next(uploaded)
            for (a, d), done in zip(pairs, on_device)]


# a null pointer as a kernel argument (8 bytes of 0, a pointer's size)
_NULL = np.uint64(0)


def _i64(x):
    return np.int64(x)


def _i32(x):
    return np.int32(x)


def bin_features(X, cut_values, cut_offsets, out):
    """See ``numpy_kernels.bin_features``. X: (n, F) float32 CuPy, any strides; out: (n, F) view
    with unit column stride (e.g. of a padded array)."""
    n_rows, n_features = X.shape
    if n_rows == 0 or n_features == 0:
        return out
    itemsize = X.itemsize
    n = n_rows * n_features
    grid = min(-(-n // _THREADS), 65535 * 16)
    _kernel("bin_features", out.itemsize)(
        (grid,), (_THREADS,),
        (X, _i64(n_rows), _i32(n_features), _i64(X.strides[0] // itemsize),
         _i64(X.strides[1] // itemsize), cp.asarray(cut_values, dtype=np.float32),
         cp.asarray(cut_offsets, dtype=np.int64), out, _i64(out.strides[0] // out.itemsize)))
    return out


def build_histograms(bins, gh, row_index, seg_start, seg_count, n_bins, n_value_bins=None):
    """See ``numpy_kernels.build_histograms``. Returns (n_nodes, F, n_bins, 2) int64 CuPy.
    n_value_bins: the shared-memory histograms are packed by it (more features a block); every
    bin of feature f must be at most n_value_bins[f] (not checked here: a larger one would add
    into another feature's counters)."""
    n_features = bins.shape[1]
    n_nodes = len(seg_start)
    hist = cp.zeros((n_nodes, n_features, n_bins, 2), dtype=_dtypes.FIXED)
    work = work_list(seg_start, seg_count)
    if len(work) == 0 or n_features == 0:
        return hist
    groups = _shared_groups(n_features, n_bins, n_value_bins, 0)
    if groups is None:
        kernel, grid, shared, group_args = _kernel("build_histograms_global", bins.itemsize), \
            (len(work), 1), 0, (_unread(),) * 3
    else:
        kernel = groups.kernel("build_histograms_shared", bins.itemsize)
        grid, shared, group_args = (len(work), groups.n_groups), groups.most_bytes, groups.args()
    _launch_shared(kernel, grid, _HIST_THREADS, shared,
                   (bins, _i64(bins.strides[0] // bins.itemsize), _i32(n_features), _i32(n_bins),
                    cp.ascontiguousarray(gh), row_index, _device_work(work), *group_args, hist))
    return hist


_CONSTANTS: collections.OrderedDict = collections.OrderedDict()
_RECORDING = threading.local()  # .held: the list a recording keeps its cached arrays in


@contextlib.contextmanager
def holding(held: list):
    """Within this block (a ``cuda.GraphRecorder`` recording), the cached device arrays this
    thread's kernels use are also appended to ``held``: a recorded graph reads them at every
    replay, after the cache may have let them go."""
    outer = getattr(_RECORDING, "held", None)
    _RECORDING.held = held
    try:
        yield
    finally:
        _RECORDING.held = outer


def _device_work(work: np.ndarray):
    """The host work list on the device, uploaded once for the same list on the same device (a
    tree's root histogram lists the same blocks every tree: no copy from the host per tree,
    which a recorded tree could not hold)."""
    return _device_constant(work)


def _device_constant(array: np.ndarray):
    """A small host array the kernels only read, on the device: uploaded once for the same
    contents on the same device (the last 32 are kept), and held by a recording."""
    key = (cp.cuda.Device().id, array.dtype.str, array.shape, array.tobytes())
    device = _CONSTANTS.get(key)
    if device is None:
        device = _CONSTANTS[key] = cp.asarray(array)
        while len(_CONSTANTS) > 32:
            _CONSTANTS.popitem(last=False)
    else:
        _CONSTANTS.move_to_end(key)
    held = getattr(_RECORDING, "held", None)
    if held is not None:
        held.append(device)
    return device


def _bound_args(bounds, n_nodes: int, n_features: int | None) -> tuple:
    """The CUDA searches' (bounded, max_delta_step, node_bounds, monotone) arguments of a
    search's ``bounds`` (``numpy_kernels.evaluate_splits``): bounded 0 (none; the arrays are
    not read), 1 (node bounds and max_delta_step) or 2 (and monotone signs)."""
    bounds = check_bounds(bounds, n_nodes, n_features)
    unread = _unread()
    if bounds is None:
        return _i32(0), np.float64(0.0), unread, unread
    max_delta_step, node_bounds, monotone = bounds
    node_bounds = _dev(node_bounds, np.float64)
    if monotone is None:
        return _i32(1), np.float64(max_delta_step), node_bounds, unread
    return _i32(2), np.float64(max_delta_step), node_bounds, _dev(monotone, np.int8)


def evaluate_splits(hist, n_value_bins, feature_allowed, inv_scale_g, inv_scale_h, reg_lambda,
                    reg_alpha, min_child_weight, bounds=None):
    """See ``numpy_kernels.evaluate_splits``; the five results are CuPy arrays.
    feature_allowed: (F,) or (n_nodes, F), host or device; bounds' arrays too."""
    n_nodes, n_features, n_bins, _ = hist.shape
    if not n_nodes:
        return _split_results(0)
    feature_allowed = cp.ascontiguousarray(cp.asarray(feature_allowed, dtype=bool))
    check_feature_mask(feature_allowed, n_nodes, n_features)
    # enough feature blocks to fill the GPU on shallow levels, at least 16 features each
    n_sm, _ = _limits()
    per_block = max(16, -(-n_features // max(1, 4 * n_sm // n_nodes)))
    n_blocks = -(-n_features // per_block)
    partial = cp.empty((n_nodes, n_blocks, 4), dtype=np.int64)  # struct Best: 4 x 8 bytes
    n_value_bins = cp.asarray(n_value_bins, dtype=np.int32)
    _kernel("evaluate_splits", 1)(
        (n_nodes, n_blocks), (_THREADS,),
        (cp.ascontiguousarray(hist), _i32(n_features), _i32(n_bins),
         n_value_bins, feature_allowed, _allowed_stride(feature_allowed, n_features),
         np.float64(inv_scale_g), np.float64(inv_scale_h), np.float64(reg_lambda),
         np.float64(reg_alpha), np.float64(min_child_weight),
         *_bound_args(bounds, n_nodes, n_features), _i32(per_block), partial))
    return _reduce_splits(partial, n_bins, n_value_bins)


def _allowed_stride(feature_allowed, n_features: int):
    """The node stride of a (F,) (0: every node's) or (n_nodes, F) feature mask."""
    return _i64(n_features if feature_allowed.ndim == 2 else 0)


def _reduce_splits(partial, width: int, n_value_bins) -> tuple:
    """Each node's best of its blocks' best candidates ((n_nodes, n_blocks, 4) int64 ``struct
    Best``; ``width``: the bins per feature that number the candidates; n_value_bins: the
    features' (F,) int32 value bin counts, CuPy) -> the five split results
    (``_split_results``)."""
    n_nodes, n_blocks, _ = partial.shape
    results = _split_results(n_nodes)
    warps_per_block = _THREADS // 32
    _kernel("reduce_splits", 1)(
        (-(-n_nodes // warps_per_block),), (_THREADS,),
        (partial, _i32(n_nodes), _i32(n_blocks), _i32(width), n_value_bins, *results))
    return results


def _split_results(n_nodes: int) -> tuple:
    """The split search's five results, (n,) gain float64, feature int32, threshold int32,
    default_left bool and (n, 2) left_sum int64: uninitialised views of one allocation, one
    after the other at 8-byte aligned offsets, so that ``to_host_all`` fetches them with one
    copy (it joins device arrays that follow each other so)."""
    return tuple(packed_empty(cp, [((n_nodes,), np.float64), ((n_nodes,), _dtypes.NODE),
                                   ((n_nodes,), np.int32), ((n_nodes,), np.bool_),
                                   ((n_nodes, 2), _dtypes.FIXED)]))


def partition_and_histogram(bins, bins_by_feature, gh, row_index, seg_start, seg_count, feature,
                            bin_threshold, default_left, small_is_left, n_bins, out=None,
                            dest=None, n_value_bins=None, side_map=None):
    """See ``numpy_kernels.partition_and_histogram``. row_index (CuPy int32) is partitioned in
    place when ``dest`` is None (through a scratch array and a copy back); otherwise the rows are
    scattered straight into ``dest`` (CuPy int32 like row_index, not sharing its memory) and the
    copy back is saved. Returns left_count (n_nodes,) int64 and hist (n_nodes, F, n_bins, 2)
    int64, CuPy: new, or ``out`` (C-contiguous CuPy) with the histograms added to it (the kernel
    adds every block's histogram into global memory with atomics, whatever it held).
    n_value_bins: the shared-memory histograms are packed by it (more features a block).
    side_map: (n_nodes, n_bins) uint8, host (device ones are copied to the host first), read
    by the partition's kernels (no pass of its own)."""
    n_features = bins.shape[1]
    n_nodes = len(seg_start)
    hist = _hist_out(out, (n_nodes, n_features, n_bins, 2), "partition_and_histogram")
    if dest is not None:
        _check_dest(dest, row_index)
    sides = () if side_map is None else \
        ((check_side_map(to_host(side_map), n_nodes, n_bins).reshape(-1), np.uint8),)
    work = work_list(seg_start, seg_count)
    if len(work) == 0:
        return cp.zeros(n_nodes, dtype=np.int64), hist
    n_blocks = len(work)
    work, n_work, *split = _upload(
        work, (np.array([n_blocks]), np.int64), (feature, np.int32), (bin_threshold, np.int32),
        (default_left, bool), (small_is_left, bool), *sides)
    map_args = (split.pop(), _i32(n_bins)) if sides else None
    left_count = _partition(bins, bins_by_feature, gh, row_index, work, n_work, n_blocks, split,
                            n_nodes, n_bins, hist, dest, n_value_bins, map_args)
    return left_count, hist


def _check_dest(dest, row_index):
    _check_out(dest, "partition_and_histogram (dest)", row_index.dtype)
    if dest.shape != row_index.shape or (dest.size and dest.data.ptr == row_index.data.ptr):
        raise ValueError(f"partition_and_histogram: dest must be another array of shape "
                         f"{row_index.shape} (None partitions row_index in place)")


def _partition(bins, bins_by_feature, gh, row_index, work, n_work, n_blocks: int, split: list,
               n_nodes: int, n_bins: int, hist, dest, n_value_bins,
               map_args: tuple | None = None):
    """The partition's launches over a device work list whose length is ``n_work`` (device
    (1,) int64), on a grid of n_blocks blocks (n_blocks >= that length: the others return).
    split: device (feature int32, bin_threshold int32, default_left bool, small_is_left bool).
    map_args: (device side map uint8, its width) or None (no side map).
    Returns left_count (n_nodes,) int64 CuPy; hist is added into."""
    *split, small_is_left = split
    split += list(map_args or (_unread(), _i32(0)))
    n_features = bins.shape[1]
    columns = _columns(bins_by_feature)
    block_left = cp.empty(n_blocks, dtype=np.int64)
    itemsize = bins.itemsize
    _kernel("count_left", itemsize)((n_blocks,), (_THREADS,),
                                    (*columns, row_index, work, n_work, *split, block_left))
    left_count = cp.zeros(n_nodes, dtype=np.int64)  # nodes without rows have no block to set it
    tile_bytes = _HIST_THREADS * 4  # the scatter's tile of the built child's rows
    groups = _shared_groups(n_features, n_bins, n_value_bins, tile_bytes) \
        if n_features else None
    # Wide data: partition alone, then the children's histograms from their new segments (each
    # of many feature groups would otherwise rank every row of the parents again).
    separate = groups is not None and groups.n_groups > _FUSED_MAX_GROUPS
    fused = groups is not None and not separate
    group_args = groups.args() if fused else (_unread(),) * 3
    target = cp.empty_like(row_index) if dest is None else dest
    gh = cp.ascontiguousarray(gh)
    bin_stride = _i64(bins.strides[0] // itemsize)
    # the _equal scatter reads no side map and adds no shared histogram of mixed widths
    equal = map_args is None and (not fused or groups.equal_widths)
    scatter = _kernel("scatter_and_histogram_equal" if equal else "scatter_and_histogram",
                      itemsize)
    _launch_shared(scatter,
                   (n_blocks, groups.n_groups if fused else 1), _HIST_THREADS,
                   (groups.most_bytes if fused else 0) + tile_bytes,
                   (bins, bin_stride, *columns, _i32(0 if separate else n_features),
                    _i32(n_bins), gh, row_index, target, work, n_work, block_left, *split,
                    small_is_left, *group_args, _i32(fused), hist, left_count))
    if dest is None:
        _kernel("copy_back", 1)((n_blocks,), (_THREADS,), (target, row_index, work, n_work))
        target = row_index
    if separate:
        _launch_shared(groups.kernel("build_child_histograms_shared", itemsize),
                       (n_blocks, groups.n_groups), _HIST_THREADS, groups.most_bytes,
                       (bins, bin_stride, _i32(n_features), _i32(n_bins), gh, target, work,
                        n_work, left_count, small_is_left, *groups.args(), hist))
    return left_count


def partition_planned(bins, bins_by_feature, gh, row_index, work, n_work, feature, bin_threshold,
                      default_left, small_is_left, n_bins, out, dest, n_value_bins=None):
    """See ``numpy_kernels.partition_planned``. work (max_blocks, 5) and n_work (1,) int64
    CuPy, from ``level_segments``; the split arrays CuPy (the level plan's). The grid is sized
    for max_blocks: nothing waits for the device."""
    n_nodes = len(feature)
    hist = _hist_out(out, (n_nodes, bins.shape[1], n_bins, 2), "partition_planned")
    _check_dest(dest, row_index)
    if len(work) == 0 or n_nodes == 0:
        return cp.zeros(n_nodes, dtype=np.int64)
    split = [_dev(feature, np.int32), _dev(bin_threshold, np.int32), _dev(default_left, bool),
             _dev(small_is_left, bool)]
    return _partition(bins, bins_by_feature, gh, row_index, _dev(work, np.int64),
                      _dev(n_work, np.int64), len(work), split, n_nodes, n_bins, hist, dest,
                      n_value_bins)


def _slot_grid(cap: int) -> tuple[int, int]:
    """(slots, blocks per slot) of the planned margin kernels: about four blocks per
    multiprocessor over the level, at least one per slot."""
    n_sm, _ = _limits()
    return cap, max(1, -(-4 * n_sm // cap))


def add_planned_leaf_values(margin, row_index, seg_start, seg_count, is_leaf, totals,
                            inv_scale_g, inv_scale_h, reg_lambda, reg_alpha, learning_rate,
                            max_delta_step=0.0):
    """See ``numpy_kernels.add_planned_leaf_values``; CuPy arrays, margin may be a column
    view. Nothing is read back."""
    cap = len(seg_start)
    if cap == 0:
        return
    _kernel("add_planned_leaf_values", 1)(
        _slot_grid(cap), (_THREADS,),
        (margin, _margin_stride(margin), _dev(row_index, _dtypes.ROW_INDEX),
         _dev(seg_start, np.int64), _dev(seg_count, np.int64), _dev(is_leaf, bool),
         _dev(totals, np.int64), np.float64(inv_scale_g), np.float64(inv_scale_h),
         np.float64(reg_lambda), np.float64(reg_alpha), np.float64(learning_rate),
         np.float64(max_delta_step)))


def add_planned_split_values(margin, bins_by_feature, row_index, split_start, split_count,
                             n_split, split_feature, split_threshold, split_default_left,
                             built_left, child_totals, child_half, inv_scale_g, inv_scale_h,
                             reg_lambda, reg_alpha, learning_rate, max_delta_step=0.0):
    """See ``numpy_kernels.add_planned_split_values``; CuPy arrays (bins_by_feature (D, n),
    any strides), margin may be a column view. Nothing is read back."""
    cap = len(split_start)
    if cap == 0:
        return
    _kernel("add_planned_split_values", bins_by_feature.itemsize)(
        _slot_grid(cap), (_THREADS,),
        (margin, _margin_stride(margin), *_columns(bins_by_feature),
         _dev(row_index, _dtypes.ROW_INDEX), _dev(split_start, np.int64),
         _dev(split_count, np.int64), _dev(n_split, np.int64), _dev(split_feature, np.int32),
         _dev(split_threshold, np.int32), _dev(split_default_left, bool),
         _dev(built_left, bool), _dev(child_totals, np.int64), _i64(child_half),
         np.float64(inv_scale_g), np.float64(inv_scale_h), np.float64(reg_lambda),
         np.float64(reg_alpha), np.float64(learning_rate), np.float64(max_delta_step)))


def rows_per_block(n_rows: int) -> int:
    """See ``common.rows_per_block``: two blocks per multiprocessor for the whole shard,
    at least 2048 rows each (as the host-built work lists)."""
    return _rows_per_block(int(n_rows))


_PLAN_THREADS = 256


def plan_level(n_parent_split, half, gain, feature, bin_threshold, default_left, left_sum,
               totals, min_gain, n_split, split_node, split_feature, split_threshold,
               split_default_left, built_left, split_gain, child_totals, is_leaf):
    """See ``numpy_kernels.plan_level``: one block; every array a C-contiguous CuPy array of
    the twin's dtypes (outputs written in place, nothing read back)."""
    cap = len(gain)
    if cap == 0:
        n_split[...] = 0
        return
    for name, out in (("n_split", n_split), ("split_node", split_node),
                      ("child_totals", child_totals)):
        _check_out(out, f"plan_level ({name})", np.int64)
    _kernel("plan_level", 1)(
        (1,), (_PLAN_THREADS,),
        (_dev(n_parent_split, np.int64), _i64(half), _i64(cap), _dev(gain, np.float64),
         _dev(feature, np.int32), _dev(bin_threshold, np.int32), _dev(default_left, bool),
         _dev(left_sum, np.int64), _dev(totals, np.int64), np.float64(min_gain), n_split,
         split_node, split_feature, split_threshold, split_default_left, built_left,
         split_gain, child_totals, is_leaf))


def level_segments(n_rows, half, n_parent_split, parent_split_start, parent_split_count,
                   left_count, parent_built_left, n_split, split_node, rows_per_block, seg_start,
                   seg_count, split_start, split_count, work, n_work):
    """See ``numpy_kernels.level_segments``: one block; CuPy arrays (at the root, half 0, the
    parent arrays are not read: any int64/bool CuPy arrays). Nothing is read back, so the
    work list's length must fit: len(work) >= ceil(n_rows / rows_per_block) + len(seg_start)
    (checked here, on the host)."""
    cap = len(seg_start)
    most = -(-int(n_rows) // int(rows_per_block)) + cap
    if len(work) < most:
        raise ValueError(f"level_segments: work has {len(work)} rows; a level of {cap} slots "
                         f"over {n_rows} rows may need {most}")
    for name, out in (("seg_start", seg_start), ("seg_count", seg_count),
                      ("split_start", split_start), ("split_count", split_count),
                      ("work", work), ("n_work", n_work)):
        _check_out(out, f"level_segments ({name})", np.int64)
    _kernel("level_segments", 1)(
        (1,), (_PLAN_THREADS,),
        (_i64(n_rows), _i64(half), _i64(cap), _dev(n_parent_split, np.int64),
         _dev(parent_split_start, np.int64), _dev(parent_split_count, np.int64),
         _dev(left_count, np.int64), _dev(parent_built_left, bool), _dev(n_split, np.int64),
         _dev(split_node, np.int64), _i64(rows_per_block), _i64(len(work)), seg_start,
         seg_count, split_start, split_count, work, n_work))


def quantise_gradients(grad, hess, scale_g, scale_h, out=None):
    """See ``numpy_kernels.quantise_gradients``. grad, hess: (n,) float32 or float64 CuPy, any
    strides (other dtypes are cast to float64). Returns (n, 2) int64 CuPy (``out`` if given)."""
    n = len(grad)
    gh = gradient_out(cp, out, n)
    if n == 0:
        return gh
    dtype = np.float32 if grad.dtype == hess.dtype == np.float32 else np.float64
    grad, hess = grad.astype(dtype, copy=False), hess.astype(dtype, copy=False)
    name = "quantise_gradients_f32" if dtype == np.float32 else "quantise_gradients"
    itemsize = np.dtype(dtype).itemsize
    _kernel(name, 1)(
        _grid(n), (_THREADS,),
        (grad, _i64(grad.strides[0] // itemsize), hess, _i64(hess.strides[0] // itemsize),
         _i64(n), np.float64(scale_g), np.float64(scale_h), gh))
    return gh


def sibling_histograms(parent, split_nodes, children, n_valid=None):
    """See ``numpy_kernels.sibling_histograms``. parent, children: C-contiguous int64 CuPy (any
    layout after the node axis); split_nodes, n_valid: host or device (a level plan's, on the
    device: nothing is read back). children is modified in place and returned."""
    n = len(split_nodes)
    check_sibling_shapes(parent, n, children)
    _check_out(children, "sibling_histograms (children)", _dtypes.FIXED)
    if children.size == 0:
        return children
    _check_out(parent, "sibling_histograms (parent)", _dtypes.FIXED)
    if n_valid is None:
        n_valid = np.array([n])
    split_nodes, n_valid = _upload_small((split_nodes, np.int64), (n_valid, np.int64))
    words = children.size // (2 * n)
    _kernel("sibling_histograms", 1)(
        _grid(n * words), (_THREADS,),
        (parent, split_nodes, _i64(n), n_valid, _i64(words), children))
    return children


def _margin_stride(margin) -> np.int64:
    return np.int64(margin.strides[0] // margin.itemsize)


def add_leaf_values(margin, row_index, seg_start, seg_count, values):
    """See ``numpy_kernels.add_leaf_values``. margin: (n,) float64 CuPy, may be a column view."""
    work = work_list(seg_start, seg_count)
    if len(work) == 0:
        return
    work, values = _upload(work, (values, np.float64))
    _kernel("add_leaf_values", 1)((len(work),), (_THREADS,),
                                  (margin, _margin_stride(margin), row_index, work, values))


def add_split_leaf_values(margin, bins_by_feature, row_index, seg_start, seg_count, feature,
                          bin_threshold, default_left, left_value, right_value):
    """See ``numpy_kernels.add_split_leaf_values`` (rows are not moved)."""
    work = work_list(seg_start, seg_count)
    if len(work) == 0:
        return
    work, *split = _upload(work, (feature, np.int32), (bin_threshold, np.int32),
                           (default_left, bool), (left_value, np.float64),
                           (right_value, np.float64))
    _kernel("add_split_leaf_values", bins_by_feature.itemsize)(
        (len(work),), (_THREADS,),
        (margin, _margin_stride(margin), *_columns(bins_by_feature), row_index, work, *split))


def _walk_trees(name: str, rows, threshold_dtype, feature, threshold, default_left, left,
                right, value, tree_root, tree_group, out, cat_start, cat_bits):
    """Launch the tree walk of kernels.cu for (n, >= F) CuPy ``rows`` (any strides) of its
    kind: raw float32 values or uint8/uint16 bins, with float32 or int32 thresholds, and the
    categorical splits' sets (None: none)."""
    n_rows = rows.shape[0]
    if n_rows == 0 or len(tree_root) == 0:
        return out
    if not out.flags.c_contiguous:
        raise ValueError(f"{name}: out must be C-contiguous")
    grid = min(-(-n_rows // _THREADS), 65535 * 16)
    cat_start, cat_bits, has_categories = _category_args(cat_start, cat_bits)
    arrays = _upload_small((feature, np.int32), (threshold, threshold_dtype),
                           (default_left, np.bool_), (left, np.int32), (right, np.int32),
                           (value, np.float64), (tree_root, np.int64), (tree_group, np.int32),
                           (cat_start, np.int32), (cat_bits, np.uint32))
    _kernel(name, rows.itemsize if rows.dtype != np.float32 else 1)(
        (grid,), (_THREADS,),
        (rows, _i64(n_rows), _i64(rows.strides[0] // rows.itemsize),
         _i64(rows.strides[1] // rows.itemsize), *arrays[:8], _i32(len(tree_root)), out,
         _i32(out.shape[1]), *arrays[8:], _i32(int(has_categories))))
    return out


def predict_margins(X, feature, threshold, default_left, left, right, value, tree_root, tree_group,
                    out, cat_start=None, cat_bits=None):
    """See ``numpy_kernels.predict_margins``. X: (n, F) float32 CuPy, any strides; out: (n, G)
    float64 C-contiguous CuPy, updated in place and returned."""
    return _walk_trees("predict_margins", X, np.float32, feature, threshold, default_left, left,
                       right, value, tree_root, tree_group, out, cat_start, cat_bits)


def predict_margins_binned(bins, feature, bin_threshold, default_left, left, right, value,
                           tree_root, tree_group, out, cat_start=None, cat_bits=None):
    """See ``numpy_kernels.predict_margins_binned``. bins: (n, >= F) uint8/uint16 CuPy, any
    strides; out: (n, G) float64 C-contiguous CuPy, updated in place and returned."""
    return _walk_trees("predict_margins_binned", bins, np.int32, feature, bin_threshold,
                       default_left, left, right, value, tree_root, tree_group, out, cat_start,
                       cat_bits)


# Shared memory a block of the paged walk stages its rows in (within a block's default 48 KB).
_STAGED_BYTES = 32 * 1024


def _staging_threads(row_bytes: int) -> int | None:
    """Rows (threads) a block of ``_walk_host_pages`` stages at a time for rows of
    ``row_bytes``; None where not even 32 fit."""
    return next((t for t in (128, 64, 32) if t * row_bytes <= _STAGED_BYTES), None)


def _mapped_view(address: int, page):
    """A CuPy array of ``page``'s shape and dtype over its mapped device ``address`` (no copy:
    kernels reading it read the host page over the bus; ``page`` must outlive their work)."""
    memory = cp.cuda.UnownedMemory(address, page.nbytes, owner=page)
    return cp.ndarray(page.shape, dtype=page.dtype, memptr=cp.cuda.MemoryPointer(memory, 0))


def _walk_host_pages(page_address, page_start, n_rows: int, row_bytes: int, bin_itemsize: int,
                     feature, bin_threshold, default_left, left, right, value, tree_root,
                     tree_group, out_address, out_strides: tuple, cat_start=None,
                     cat_bits=None) -> None:
    """``predict_margins_binned`` over every host page in one launch (``Backend
    .predict_pages_binned``): page p's rows (``row_bytes`` bytes apart, at device address
    ``page_address[p]``: page-locked, mapped) are the launch's rows page_start[p] ..
    page_start[p + 1] (of ``n_rows``), its margins the float64 (rows, groups) matrix at device
    address ``out_address[p]`` with ``out_strides`` (row, group) in elements, updated in place.
    Tables: uint64/int64 device arrays. Rows must fit the staging memory
    (``_staging_threads``: at most 1,024 bytes)."""
    threads = _staging_threads(row_bytes)
    if threads is None:
        raise ValueError(f"predict_pages_binned: rows of {row_bytes} bytes are too wide to "
                         f"stage")
    if n_rows == 0 or len(tree_root) == 0:
        return
    word = next(b for b in (8, 4, 1) if row_bytes % b == 0)
    cat_start, cat_bits, has_categories = _category_args(cat_start, cat_bits)
    arrays = _upload_small((feature, np.int32), (bin_threshold, np.int32),
                           (default_left, np.bool_), (left, np.int32), (right, np.int32),
                           (value, np.float64), (tree_root, np.int64), (tree_group, np.int32),
                           (cat_start, np.int32), (cat_bits, np.uint32))
    _kernel(f"predict_pages_binned_{word}", bin_itemsize)(
        (-(-n_rows // threads),), (threads,),
        (page_address, page_start, _i32(len(page_address)), _i64(row_bytes // word),
         *arrays[:8], _i32(len(tree_root)), out_address, _i64(out_strides[0]),
         _i64(out_strides[1]), *arrays[8:], _i32(int(has_categories))),
        shared_mem=threads * row_bytes)


def _forest(feature, threshold, default_left, left, right, value, tree_root, tree_group):
    """A forest's node arrays on the device in the kernels' dtypes: one host-to-device copy
    when they are host arrays (prediction after every round of training uploads them)."""
    return _upload_small((feature, np.int32), (threshold, np.float32), (default_left, np.bool_),
                         (left, np.int32), (right, np.int32), (value, np.float64),
                         (tree_root, np.int64), (tree_group, np.int32))



# ---------------------------------------------------------------------------------------------
# Explaining predictions (kernels.cu's section): see numpy_kernels. One thread per row.

@functools.lru_cache(maxsize=None)
def _explain_kernel(name: str, max_path: int = 8, tree_words: int = 0):
    """An explanation kernel of kernels.cu for paths of at most ``max_path`` features (the
    SHAP kernels' loops are unrolled to it: one module per forest depth in use), caching a
    row's directions in trees of at most ``tree_words`` * 32 nodes (0: no cache)."""
    options = ("--std=c++17", "--fmad=false", "-DBIN_T=unsigned char",
               f"-DMAX_PATH={max_path}", f"-DTREE_WORDS={tree_words}")
    return _raw_kernel(_source("kernels.cu"), name, options)


# Trees of up to this many nodes have a row's directions cached per tree in the SHAP kernels
# (32 words of registers or local memory per thread); larger ones test each path's nodes.
_CACHED_TREE_NODES = 1024
# Shared memory of one block's row sums in shap_contributions (the default limit of a block).
_SHARED_SUMS = 48 * 1024


def _path_trees(path_ptr, elem_ptr, edge_node, n_nodes: int):
    """(path_root, path_tree_size, tree words) of the SHAP kernels: each path's tree root (its
    smallest node: the root is the first node of its tree) and node count, from host arrays."""
    path_ptr, elem_ptr = to_host(path_ptr), to_host(elem_ptr)
    edge_node = to_host(edge_node).astype(np.int64)
    first_edge = elem_ptr[path_ptr[:-1]]
    has_edges = path_ptr[1:] > path_ptr[:-1]
    root = np.full(len(first_edge), -1, dtype=np.int64)
    if has_edges.any():  # segments of the paths with edges only (a leaf-only tree has none)
        root[has_edges] = np.minimum.reduceat(edge_node, first_edge[has_edges])
    roots = np.unique(root[root >= 0])
    ends = np.append(roots[1:], n_nodes)
    size = np.zeros(len(root), dtype=np.int64)
    if len(roots):
        at = np.searchsorted(roots, np.maximum(root, 0))
        size = np.where(root >= 0, (ends - roots)[np.minimum(at, len(roots) - 1)], 0)
    largest = int(size.max(initial=0))
    words = -(-largest // 32) if largest <= _CACHED_TREE_NODES else 0
    return root, size, words


def _category_args(cat_start, cat_bits) -> tuple:
    """(cat_start, cat_bits, has_categories) as the walks take them: stand-in arrays and 0 for a
    forest without categorical splits (cat_start None)."""
    if cat_start is None:
        return (*_no_categories(cp.cuda.runtime.getDevice()), 0)
    return cat_start, cat_bits, 1


@functools.lru_cache(maxsize=None)
def _no_categories(device: int) -> tuple:
    """The stand-in (cat_start, cat_bits) of forests without categorical splits, on ``device``
    (made once: a walk then uploads nothing for them)."""
    return cp.zeros(1, dtype=cp.int32), cp.zeros(1, dtype=cp.uint32)


def _explain_args(X, feature, threshold, default_left, cat_start, cat_bits):
    """(grid, the X and node arguments, the categorical arguments) of an explanation kernel."""
    cat_start, cat_bits, has_categories = _category_args(cat_start, cat_bits)
    nodes = _upload_small((feature, np.int32), (threshold, np.float32), (default_left, np.bool_),
                          (cat_start, np.int32), (cat_bits, np.uint32))
    rows = (X, _i64(X.shape[0]), _i64(X.strides[0] // X.itemsize),
            _i64(X.strides[1] // X.itemsize), *nodes[:3])
    return _grid(X.shape[0]), rows, (*nodes[3:], _i32(int(has_categories)))


def predict_leaves(X, feature, threshold, default_left, left, right, tree_root, out,
                   cat_start=None, cat_bits=None):
    """See numpy_kernels.predict_leaves. X: (n, F) float32 CuPy, any strides; out: (n, T)
    int32 C-contiguous CuPy, written and returned."""
    if X.shape[0] == 0 or len(tree_root) == 0:
        return out
    _check_out(out, "predict_leaves", np.int32)
    grid, rows, cats = _explain_args(X, feature, threshold, default_left,
                                     cat_start, cat_bits)
    tree = _upload_small((left, np.int32), (tree_root, np.int64))
    _explain_kernel("predict_leaves")(grid, (_THREADS,),
                                      (*rows, *tree, _i32(len(tree_root)), out, *cats))
    return out


def saabas_contributions(X, feature, threshold, default_left, left, right, tree_root,
                         tree_group, node_mean, out, cat_start=None, cat_bits=None):
    """See numpy_kernels.saabas_contributions. out: (n, G, F + 1) float64 C-contiguous CuPy,
    added to and returned."""
    if X.shape[0] == 0 or len(tree_root) == 0:
        return out
    _check_out(out, "saabas_contributions", np.float64)
    grid, rows, cats = _explain_args(X, feature, threshold, default_left, cat_start,
                                     cat_bits)
    tree = _upload_small((left, np.int32), (tree_root, np.int64), (tree_group, np.int32))
    mean = _dev(node_mean, np.float64)
    _explain_kernel("saabas_contributions")(
        grid, (_THREADS,), (*rows, *tree, _i32(len(tree_root)), mean, out, _i32(out.shape[1]),
                            _i32(out.shape[2]), *cats))
    return out


def _shap(name, X, feature, threshold, default_left, path_ptr, path_value, path_group,
          elem_ptr, elem_feature, elem_zero, edge_node, edge_left, shapley_weights, out,
          cat_start, cat_bits):
    if X.shape[0] == 0 or len(path_value) == 0:
        return out
    _check_out(out, name, np.float64)
    grid, rows, cats = _explain_args(X, feature, threshold, default_left, cat_start, cat_bits)
    paths = _upload_small((path_ptr, np.int64), (path_value, np.float64),
                          (path_group, np.int32), (elem_ptr, np.int64), (elem_feature, np.int32),
                          (elem_zero, np.float64), (edge_node, np.int32), (edge_left, np.bool_),
                          (shapley_weights, np.float64))
    max_path = max(1, shapley_weights.shape[0] - 1)
    if max_path > 32:  # a path's satisfied elements are the bits of a 32-bit word
        raise ValueError(f"{name}: a path tests {max_path} features; the GPU explains paths of "
                         f"at most 32 (explain on the CPU)")
    root, size, words = _path_trees(path_ptr, elem_ptr, edge_node, len(feature))
    trees = _upload_small((root, np.int64), (size, np.int64))
    args = (*rows, *paths[:3], _i64(len(path_value)), *paths[3:], _i32(shapley_weights.shape[1]),
            out, _i32(out.shape[1]), _i32(out.shape[2]), *cats, *trees)
    kernel = _explain_kernel(name, max_path, words)
    if name != "shap_contributions":
        kernel(grid, (_THREADS,), args)
        return out
    # a block's rows summed in shared memory where a warp's rows fit (48 KB)
    row_bytes = out.shape[1] * out.shape[2] * 8
    threads = min(_THREADS, (_SHARED_SUMS // row_bytes) // 32 * 32)
    if threads >= 32:
        kernel((min(-(-X.shape[0] // threads), 65535 * 16),), (threads,), (*args, _i32(1)),
               shared_mem=threads * row_bytes)
    else:
        kernel(grid, (_THREADS,), (*args, _i32(0)))
    return out


def shap_contributions(X, feature, threshold, default_left, path_ptr, path_value, path_group,
                       elem_ptr, elem_feature, elem_zero, edge_node, edge_left, shapley_weights,
                       out, cat_start=None, cat_bits=None):
    """See numpy_kernels.shap_contributions. out: (n, G, F + 1) float64 C-contiguous CuPy,
    added to and returned."""
    return _shap("shap_contributions", X, feature, threshold, default_left, path_ptr,
                 path_value, path_group, elem_ptr, elem_feature, elem_zero, edge_node, edge_left,
                 shapley_weights, out, cat_start, cat_bits)


def shap_interactions(X, feature, threshold, default_left, path_ptr, path_value, path_group,
                      elem_ptr, elem_feature, elem_zero, edge_node, edge_left, shapley_weights,
                      out, cat_start=None, cat_bits=None):
    """See numpy_kernels.shap_interactions. out: (n, G, F + 1, F + 1) float64 C-contiguous
    CuPy, added to and returned."""
    return _shap("shap_interactions", X, feature, threshold, default_left, path_ptr,
                 path_value, path_group, elem_ptr, elem_feature, elem_zero, edge_node, edge_left,
                 shapley_weights, out, cat_start, cat_bits)

# ---------------------------------------------------------------------------------------------
# Sparse columns (cuda/sparse.cu): see the "Sparse columns" section of numpy_kernels. The small
# per-level or per-model arrays (bin_offsets, common_bin, n_value_bins, feature_allowed,
# dense_feature, sparse_feature, the segments) may be host arrays; the entry arrays, gh,
# row_index and histograms are CuPy arrays.

def _grid(n: int) -> tuple[int]:
    """Blocks of a grid-stride kernel over n items (n > 0)."""
    return (min(-(-n // _THREADS), 65535 * 16),)


def _columns(bins_by_feature) -> tuple:
    """The kernel arguments of a (D, n) CuPy bins-by-feature matrix of any strides (D may be 0):
    the array, its feature stride and its row stride in elements. No copy: a transposed view of
    the row-major bins is read where it lies."""
    size = bins_by_feature.itemsize
    return (bins_by_feature, _i64(bins_by_feature.strides[0] // size),
            _i64(bins_by_feature.strides[1] // size))


def _dev(array, dtype):
    """``array`` (host or device) as a C-contiguous CuPy array of ``dtype`` (no copy when it
    already is one: then returned at once, as a level's kernels pass a hundred such a tree)."""
    if isinstance(array, cp.ndarray) and array.dtype == dtype and array.flags.c_contiguous:
        return array
    return cp.ascontiguousarray(cp.asarray(array, dtype=dtype))


_UNREAD: dict = {}


def _unread():
    """A one-byte device array for kernel arguments that are not read, one per device (made
    once: an allocation and a fill each split search cost host time on every level)."""
    device = cp.cuda.Device().id
    if device not in _UNREAD:
        _UNREAD[device] = cp.zeros(1, dtype=np.int8)
    return _UNREAD[device]


def _entry_features(entry_feature):
    """The sparse store's (nnz,) entry_feature as a C-contiguous CuPy array of its own dtype,
    int16 or int32 (``_dtypes.entry_feature_dtype``). Never converted: the store is the largest
    array of sparse training, and widening int16 ids would copy all of it every call."""
    dtype = np.dtype(entry_feature.dtype)
    if dtype not in (np.dtype(np.int16), np.dtype(np.int32)):
        raise TypeError(f"entry_feature must be int16 or int32 sparse-local feature ids, not "
                        f"{dtype}")
    return _dev(entry_feature, dtype)


def _upload_small(*arrays) -> list:
    """Small (array, dtype) pairs on the device, C-contiguous, in one copy when all are host.
    Device arrays already of their dtype and C-contiguous are taken as they are (a forest
    uploaded once and walked on many pages costs no CuPy call per array and page)."""
    ready = [isinstance(a, cp.ndarray) and a.dtype == d and a.flags.c_contiguous
             for a, d in arrays]
    if all(ready):
        return [a for a, _ in arrays]
    rest = [pair for pair, done in zip(arrays, ready) if not done]
    _, *device = _upload(np.empty((0, 5), dtype=np.int64), *rest)
    device = iter([cp.ascontiguousarray(d) for d in device])
    return [a if done else next(device) for (a, _), done in zip(arrays, ready)]


def _check_out(out, name: str, dtype=None):
    if not isinstance(out, cp.ndarray) or not out.flags.c_contiguous or \
            (dtype is not None and out.dtype != dtype):
        raise ValueError(f"{name}: the output must be a C-contiguous CuPy array"
                         + (f" of {np.dtype(dtype)}" if dtype is not None else ""))


def _hist_out(out, shape, name: str):
    """The histograms a kernel adds into: new zeros, or the caller's ``out`` once checked."""
    if out is None:
        return cp.zeros(shape, dtype=_dtypes.FIXED)
    _check_out(out, name, _dtypes.FIXED)
    if out.shape != tuple(shape):
        raise ValueError(f"{name}: out has shape {out.shape}, not {tuple(shape)}")
    return out


def bin_entries(values, entry_feature, cut_values, cut_offsets, out):
    """See ``numpy_kernels.bin_entries``. out: (nnz,) uint8/uint16 C-contiguous CuPy, written
    and returned."""
    nnz = len(values)
    if nnz == 0:
        return out
    _check_out(out, "bin_entries")
    _sparse_kernel("bin_entries", out.itemsize)(
        _grid(nnz), (_THREADS,),
        (_dev(values, np.float32), _i64(nnz), _dev(entry_feature, np.int32),
         _dev(cut_values, np.float32), _dev(cut_offsets, np.int64), out))
    return out


def build_sparse_histograms(indptr, entry_feature, entry_bin, bin_offsets, gh, row_index,
                            seg_start, seg_count, n_slots, out=None, slots=None, split_left=None,
                            built_left=None):
    """See ``numpy_kernels.build_sparse_histograms`` (``slots`` is not read: the device keeps
    none). Returns (n_nodes, n_slots, 2) int64 CuPy,
    common bins 0: new, or ``out`` (C-contiguous CuPy) with the histograms added to it. A node's
    compact histogram is built in shared memory when it fits (16 bytes a slot), else with global
    atomics; either way it reaches ``hist`` by atomic adds. entry_feature: int16 or int32 CuPy
    (the kernel is compiled for its width; any other dtype raises TypeError). With split_left
    (device left counts), the work list covers the whole split segments (host) and each block
    keeps its built child's positions on the device: the host does not wait for the partition."""
    n_slots = int(n_slots)
    entry_feature = _entry_features(entry_feature)  # checked even when there is nothing to add
    hist = _hist_out(out, (len(seg_start), n_slots, 2), "build_sparse_histograms")
    if n_slots == 0 or len(entry_bin) == 0:
        return hist
    work = work_list(seg_start, seg_count)
    if len(work) == 0:
        return hist
    children = split_left is not None
    work, offsets, *halves = _upload(work, (bin_offsets, np.int64), *(
        ((split_left, np.int64), (built_left, np.uint8)) if children else ()))
    _, budget = _limits()
    shared = 16 * n_slots  # 4 words (two int64 counters as low/high pairs) per slot
    use_shared = shared <= budget
    _launch_shared(_sparse_kernel("build_sparse_histograms", entry_bin.itemsize,
                                  entry_feature.itemsize), (len(work),),
                   _THREADS, shared if use_shared else 0,
                   (_dev(indptr, np.int64), entry_feature,
                    _dev(entry_bin, entry_bin.dtype), cp.ascontiguousarray(offsets),
                    _dev(gh, _dtypes.FIXED), _dev(row_index, _dtypes.ROW_INDEX),
                    cp.ascontiguousarray(work), _i64(n_slots), _i32(use_shared),
                    *(halves if children else (_NULL, _NULL)), hist))
    return hist


def fill_common_bins(hist, totals, bin_offsets, common_bin):
    """See ``numpy_kernels.fill_common_bins``. hist: (n_nodes, n_slots, 2) int64 C-contiguous
    CuPy, modified in place and returned; totals (n_nodes, 2) int64."""
    n_nodes, n_slots, _ = hist.shape
    n_features = len(common_bin)
    if n_nodes == 0 or n_features == 0:
        return hist
    _check_out(hist, "fill_common_bins", _dtypes.FIXED)
    offsets, common = _upload_small((bin_offsets, np.int64), (common_bin, np.int32))
    _sparse_kernel("fill_common_bins", 1)(
        _grid(n_nodes * n_features), (_THREADS,),
        (hist, _i64(n_nodes), _i64(n_slots), _i32(n_features), _dev(totals, _dtypes.FIXED),
         offsets, common))
    return hist


# Sorted-partition categories are sorted in shared memory (12 bytes each) up to the largest
# power of two the block's shared memory holds (8,192 on an H100 with 100 KB); a feature with
# more categories sorts in global scratch.
_CATEGORY_SORT_BYTES = 12
_CATEGORY_SORT_LIMIT = None  # a lower cap on the shared-memory sort (tests: the global one)


def categorical_splits(hist, total, columns, n_categories, onehot, max_cat_threshold,
                       inv_scale_g, inv_scale_h, reg_lambda, reg_alpha, min_child_weight,
                       cat_smooth, cat_l2, bounds=None):
    """See ``numpy_kernels.categorical_splits``; the six results are CuPy arrays. hist, total:
    CuPy int64; columns, n_categories: host arrays. One block per (node, feature)
    (cuda/categories.cu)."""
    n_nodes, n_features = hist.shape[0], len(columns)
    n_categories = to_host(n_categories).astype(np.int64)
    width = categorical_width(onehot, n_categories, max_cat_threshold)
    gain = cp.full((n_nodes, n_features), -np.inf)
    missing_right = cp.zeros((n_nodes, n_features), dtype=bool)
    right_sum = cp.zeros((n_nodes, n_features, 2), dtype=_dtypes.FIXED)
    size = cp.zeros((n_nodes, n_features), dtype=np.int32)
    order = cp.full((n_nodes, n_features, width), -1, dtype=np.int32)
    n_sorted = cp.zeros((n_nodes, n_features), dtype=np.int32)
    if n_nodes == 0 or n_features == 0:
        return gain, missing_right, right_sum, size, order, n_sorted
    sort_width = 1 << max(int(n_categories.max()) - 1, 0).bit_length()
    fits = 1 << ((_limits()[1] - 64) // _CATEGORY_SORT_BYTES).bit_length() - 1
    capacity = min(sort_width, fits, _CATEGORY_SORT_LIMIT or fits)
    # global scratch only for the features whose sort does not fit: slot[j] (-1: shared)
    overflows = np.array([not onehot and 1 << max(int(k) - 1, 0).bit_length() > capacity
                          for k in n_categories], dtype=bool)
    slot = np.where(overflows, np.cumsum(overflows) - 1, -1).astype(np.int32)
    n_over = int(overflows.sum())
    scratch_width = sort_width if n_over else 1
    scratch_keys = cp.empty(max(n_nodes * n_over, 1) * scratch_width, dtype=np.float64)
    scratch_cats = cp.empty(max(n_nodes * n_over, 1) * scratch_width, dtype=np.int32)
    columns, n_categories, slot = _upload_small((columns, np.int64), (n_categories, np.int64),
                                                (slot, np.int32))
    _launch_shared(
        _categories_kernel(), (n_nodes * n_features,), _THREADS,
        0 if onehot else _CATEGORY_SORT_BYTES * capacity,
        (_dev(hist, _dtypes.FIXED), _i64(hist.shape[1]), _i64(hist.shape[2]),
         _dev(total, _dtypes.FIXED), columns, n_categories, _i32(n_features), _i32(bool(onehot)),
         _i32(max_cat_threshold), np.float64(inv_scale_g), np.float64(inv_scale_h),
         np.float64(reg_lambda if onehot else reg_lambda + cat_l2), np.float64(reg_alpha),
         np.float64(min_child_weight), np.float64(cat_smooth),
         *_bound_args(bounds, n_nodes, None)[:3], _i32(0 if onehot else capacity),
         scratch_keys, scratch_cats, slot, _i32(n_over), _i32(scratch_width), gain,
         missing_right, right_sum, size, order, _i32(width), n_sorted))
    return gain, missing_right, right_sum, size, order, n_sorted


@functools.lru_cache(maxsize=None)
def _categories_kernel():
    return _compile("categories.cu", "categorical_splits", 1)


def evaluate_sparse_splits(hist, bin_offsets, n_value_bins, feature_allowed, inv_scale_g,
                           inv_scale_h, reg_lambda, reg_alpha, min_child_weight, bounds=None,
                           padded_bins=None):
    """See ``numpy_kernels.evaluate_sparse_splits``; the five results are CuPy arrays. With no
    sparse feature (S = 0) every node gets no split (gain -inf, feature -1). With padded_bins,
    device offsets, value bin counts and mask are taken as they are: nothing goes up or down
    (the store's are on the device; the host offsets of 20,000 features were a 160 KB upload
    and a scan a level)."""
    n_nodes, n_slots, _ = hist.shape
    n_features = len(n_value_bins)
    if n_nodes == 0 or n_features == 0:
        return (cp.full(n_nodes, -np.inf, dtype=np.float64),
                cp.full(n_nodes, -1, dtype=_dtypes.NODE), cp.zeros(n_nodes, dtype=np.int32),
                cp.zeros(n_nodes, dtype=bool), cp.zeros((n_nodes, 2), dtype=_dtypes.FIXED))
    check_feature_mask(feature_allowed, n_nodes, n_features)
    if padded_bins is None:
        # the twin's padded width: candidate indices are numbered in its (feature, t, d) order
        bin_offsets = to_host(bin_offsets).astype(np.int64)
        padded_bins = padded_width(bin_offsets)
    offsets, n_value_bins, feature_allowed = _upload_small(
        (bin_offsets, np.int64), (n_value_bins, np.int32), (feature_allowed, bool))
    stride = _allowed_stride(feature_allowed, n_features)
    threads = min(_THREADS, 32 * -(-n_features // 32))  # whole warps: the reductions shuffle
    n_blocks = -(-n_features // threads)
    partial = cp.empty((n_nodes, n_blocks, 4), dtype=np.int64)  # struct Best: 4 x 8 bytes
    _sparse_kernel("evaluate_sparse_splits", 1)(
        (n_nodes, n_blocks), (threads,),
        (_dev(hist, _dtypes.FIXED), _i64(n_slots), _i32(n_features), offsets, n_value_bins,
         feature_allowed, stride, _i32(padded_bins), np.float64(inv_scale_g),
         np.float64(inv_scale_h),
         np.float64(reg_lambda), np.float64(reg_alpha), np.float64(min_child_weight),
         *_bound_args(bounds, n_nodes, n_features), partial))
    return _reduce_splits(partial, padded_bins, n_value_bins)


def split_column(bins_by_feature, indptr, entry_feature, entry_bin, common_bin, row_index,
                 seg_start, seg_count, dense_feature, sparse_feature, out, columns=None):
    """See ``numpy_kernels.split_column`` (``columns`` is not read: a thread searches its own
    row's entries). out: (n_rows,) C-contiguous CuPy of the bins' dtype,
    written at the rows of the listed segments and returned. entry_feature: int16 or int32 CuPy
    (the kernel is compiled for its width; any other dtype raises TypeError)."""
    entry_feature = _entry_features(entry_feature)  # checked even when no row is listed
    work = work_list(seg_start, seg_count)
    if len(work) == 0:
        return out
    _check_out(out, "split_column")
    work, dense_feature, sparse_feature, common_bin = _upload(
        work, (dense_feature, np.int32), (sparse_feature, np.int32), (common_bin, np.int32))
    if bins_by_feature.dtype != out.dtype:
        raise TypeError(f"split_column: bins are {bins_by_feature.dtype}, out {out.dtype}")
    _sparse_kernel("split_column", out.itemsize, entry_feature.itemsize)(
        (len(work),), (_THREADS,),
        (*_columns(bins_by_feature), _dev(indptr, np.int64),
         entry_feature, _dev(entry_bin, out.dtype),
         cp.ascontiguousarray(common_bin), _dev(row_index, _dtypes.ROW_INDEX),
         cp.ascontiguousarray(work), cp.ascontiguousarray(dense_feature),
         cp.ascontiguousarray(sparse_feature), out))
    return out


def map_sides(bins_by_feature, row_index, seg_start, seg_count, ids, side_map, out):
    """See ``numpy_kernels.map_sides``. bins_by_feature, row_index, out: CuPy (out
    C-contiguous, the bins' dtype); the others host or device. out written at the listed rows
    and returned."""
    work = work_list(seg_start, seg_count)
    if len(work) == 0:
        return out
    _check_out(out, "map_sides", bins_by_feature.dtype)
    side_map = to_host(side_map)
    work, ids, sides = _upload(work, (ids, np.int32), (side_map.reshape(-1), np.uint8))
    _kernel("map_sides", bins_by_feature.itemsize)(
        (len(work),), (_THREADS,),
        (*_columns(bins_by_feature), _dev(row_index, _dtypes.ROW_INDEX), work, ids, sides,
         _i32(side_map.shape[1]), out))
    return out


def predict_margins_csr(indptr, indices, data, feature, threshold, default_left, left, right,
                        value, tree_root, tree_group, out):
    """See ``numpy_kernels.predict_margins_csr``. indptr/indices/data: CuPy CSR arrays;
    out: (n, G) float64 C-contiguous CuPy, updated in place and returned."""
    n_rows = len(indptr) - 1
    if n_rows <= 0 or len(tree_root) == 0:
        return out
    _check_out(out, "predict_margins_csr", np.float64)
    _sparse_kernel("predict_margins_csr", 1)(
        _grid(n_rows), (_THREADS,),
        (_dev(indptr, np.int64), _i64(n_rows), _dev(indices, np.int32), _dev(data, np.float32),
         *_forest(feature, threshold, default_left, left, right, value, tree_root, tree_group),
         _i32(len(tree_root)), out, _i32(out.shape[1])))
    return out


# ---------------------------------------------------------------------------------------------
# Evaluation metrics (cuda/metrics.cu): see the section of numpy_kernels. Every sum is of
# integers (64-bit atomics, or CuPy's integer reductions), exact in any order, so it equals the
# twin's; few launches a call (evaluation runs every round, and its launches cost host time the
# training loop needs).

def fixed_point_words(values, scale, low_scale):
    """See ``numpy_kernels.fixed_point_words``; a (2,) int64 CuPy array (nothing is read back).
    scale: a float, or a 0-d float64 CuPy array (read on the device). One launch: block sums
    added with 64-bit atomics."""
    values = cp.ascontiguousarray(values, dtype=cp.float64).reshape(-1)
    out = cp.zeros(2, dtype=cp.int64)
    if values.size == 0:
        return out
    on_device = isinstance(scale, cp.ndarray)
    scale_array = cp.ascontiguousarray(scale, dtype=cp.float64) if on_device else out
    _metrics_kernel("fixed_point_words")(
        (min(_grid(values.size)[0], 1024),), (_THREADS,),
        (values, _i64(values.size), scale_array, np.float64(0.0 if on_device else scale),
         np.int32(on_device), np.float64(low_scale), out))
    return out


@functools.lru_cache(maxsize=None)
def _metrics_kernel(name: str):
    return _raw_kernel((_CUDA_DIR / "metrics.cu").read_text(), name,
                       ("--std=c++17", "--fmad=false"))


def quantile_tally(keys, groups, weights, prefix, shift, table):
    """See ``numpy_kernels.quantile_tally``: CuPy arrays (weights may be None); table added
    into with 64-bit atomics and returned (nothing waits for the device)."""
    if shift not in range(0, 64, 8):
        raise ValueError(f"quantile_tally: shift must be a multiple of 8 in [0, 56], got {shift}")
    n = int(keys.shape[0])
    if n == 0:
        return table
    _check_out(table, "quantile_tally", np.int64)
    has_weights = weights is not None
    grid = min(-(-n // _THREADS), 4 * _limits()[0] * 8)
    _metrics_kernel("quantile_tally")(
        (grid,), (_THREADS,),
        (_dev(keys, np.uint64), _dev(groups, np.int64),
         _dev(weights if has_weights else cp.zeros(1), np.int64), _i32(has_weights),
         _dev(prefix, np.uint64), _i32(shift), _i64(n), table))
    return table


def quantile_select(table, remaining, prefix):
    """See ``numpy_kernels.quantile_select``: CuPy arrays, one block a group (a scan of its
    256 slots in shared memory); remaining and prefix updated in place on the device."""
    n_groups = int(remaining.shape[0])
    if n_groups == 0:
        return
    for array, name, dtype in ((table, "table", np.int64), (remaining, "remaining", np.int64),
                               (prefix, "prefix", np.uint64)):
        _check_out(array, f"quantile_select's {name}", dtype)
    _metrics_kernel("quantile_select")((n_groups,), (256,), (table, remaining, prefix))


def sigmoid(x, out):
    """See ``numpy_kernels.sigmoid``: CuPy's operations in the same order (CUDA's exp may
    differ from the host's in the last bits); they record into a graph."""
    x = cp.asarray(x, dtype=cp.float64)
    return sigmoid_with(cp, x, check_column_out(x, out, "sigmoid"))


_fused_logistic: dict = {}  # weighted or not -> the fused kernel (CuPy traces each once)


def logistic_gradients(margin, label, weight):
    """See ``numpy_kernels.logistic_gradients``: one fused kernel of the plain expressions
    (``Backend.fused``'s ``cupy.fuse``; the values of the twin's steps, CUDA's exp aside)."""
    check_loss_arguments(margin, label, weight, 1, "logistic_gradients")
    weighted = weight is not None
    kernel = _fused_logistic.get(weighted)
    if kernel is None:
        if weighted:
            def function(m, y, w):
                return logistic_gradients_with(cp, m, y, w)
        else:
            def function(m, y):
                return logistic_gradients_with(cp, m, y, None)
        kernel = _fused_logistic[weighted] = cp.fuse(
            kernel_name="gbflow_logistic_gradients" + ("_weighted" if weighted else ""))(function)
    margin = cp.asarray(margin, dtype=cp.float64)
    return kernel(margin, label, weight) if weighted else kernel(margin, label)


def softmax_gradients(margin, label, weight):
    """See ``numpy_kernels.softmax_gradients``: CuPy's operations (a row's sum in CuPy's
    order)."""
    check_loss_arguments(margin, label, weight, 2, "softmax_gradients")
    return softmax_gradients_with(cp, cp.asarray(margin, dtype=cp.float64), label, weight)


# Values per block of ``any_infinite``: the boolean temporary stays 16 MB (a whole 10M x 28 one
# took 267 MiB of the device beside the data).
_INF_CHECK_VALUES = 1 << 24


def any_infinite(X) -> bool:
    """See ``numpy_kernels.any_infinite``: whole-block reductions, one read back (CuPy's
    per-column reduction of a tall row-major matrix was one slow strided pass: 0.12 s at
    10M x 28 on an H100)."""
    step = max(1, _INF_CHECK_VALUES // max(X.shape[1], 1))
    found = cp.zeros((), dtype=bool)
    for start in range(0, len(X), step):
        found |= cp.isinf(X[start:start + step]).any()
    return bool(found)


def sketch_counts(values, feature, f0, weight, slot_of, table):
    """See ``numpy_kernels.sketch_counts``: CuPy's operations and ``table_counts``' atomic
    adds."""
    check_sketch_arguments(values, feature, weight, slot_of, table, "sketch_counts")
    return sketch_counts_with(cp, table_counts, values, feature, int(f0), weight, slot_of, table)


def sketch_selected(values, feature, f0, slot_of, wanted, out):
    """See ``numpy_kernels.sketch_selected``: CuPy's operations."""
    check_sketch_arguments(values, feature, None, slot_of, None, "sketch_selected",
                           wanted=wanted, out=out)
    return sketch_selected_with(cp, values, feature, int(f0), slot_of, wanted, out)


def prediction_keys(values):
    """See ``numpy_kernels.prediction_keys``: CuPy's operations (they record into a graph)."""
    return prediction_keys_with(cp, cp.asarray(values))


def key_buckets(keys, low, span, bits: int):
    """See ``numpy_kernels.key_buckets``: CuPy's integer operations; low and span may be 0-d
    device arrays (nothing is read back)."""
    return key_buckets_with(cp, cp.asarray(keys, dtype=cp.int64), integer_scalar(low, "low"),
                            integer_scalar(span, "span"), int(bits))


def auc_tally(bucket, label, weight, scale, out):
    """See ``numpy_kernels.auc_tally``. bucket: (n,) int64 CuPy (any stride); out: (2,
    n_buckets) int64 C-contiguous CuPy, updated in place with 64-bit atomics (nothing waits for
    the device)."""
    n = int(bucket.shape[0])
    if n == 0:
        return out
    _check_out(out, "auc_tally", np.int64)
    if bucket.dtype != cp.int64 or bucket.strides[0] % 8:
        bucket = cp.ascontiguousarray(bucket, dtype=cp.int64)
    label = cp.ascontiguousarray(label, dtype=cp.float64)
    weights = cp.ascontiguousarray(weight, dtype=cp.float64) if weight is not None else label
    _metrics_kernel("auc_tally")(
        (min(_grid(n)[0], 65_536),), (_THREADS,),
        (bucket, _i64(bucket.strides[0] // 8), label, weights, np.int32(weight is not None),
         np.float64(scale), _i64(n), _i64(out.shape[1]), out))
    return out


def auc_words(table):
    """See ``numpy_kernels.auc_words``: the same integer operations with CuPy (nothing is read
    back; CuPy's scan is parallel, where one block a table was slow on 2**20 buckets)."""
    positive, negative = table[..., 0, :], table[..., 1, :]
    below = cp.cumsum(negative, axis=-1) - negative
    return cp.stack([(positive * (2 * below + negative)).sum(axis=-1), positive.sum(axis=-1),
                     negative.sum(axis=-1)], axis=-1)


def occupied_keys(keys):
    """See ``numpy_kernels.occupied_keys``: CuPy's sort and scans (they record into a graph)."""
    return occupied_keys_with(cp, cp.asarray(keys, dtype=cp.int64))


def auc_bucket_words(bucket, label, weight, scale, n_buckets: int):
    """See ``numpy_kernels.auc_bucket_words``: the dense table's tally and words (the device's
    atomics make the table cheap; nothing is read back)."""
    table = cp.zeros((2, int(n_buckets)), dtype=cp.int64)
    return auc_words(auc_tally(bucket, label, weight, scale, table))


def log_gamma(values):
    """See ``numpy_kernels.log_gamma``: CuPy's lgamma (it may differ from the host's in the last
    bits, as its exp and log do)."""
    from cupyx.scipy.special import gammaln
    return gammaln(cp.asarray(values, dtype=cp.float64))


@functools.lru_cache(maxsize=None)
def _table_kernels():
    count = cp.ElementwiseKernel(
        "I id, int64 size", "raw uint64 table",
        "if (id >= 0 && id < size) atomicAdd(&table[id], 1ULL);", "gbflow_table_count")
    total = cp.ElementwiseKernel(
        "I id, float64 w, int64 size", "raw float64 table",
        "if (id >= 0 && id < size) atomicAdd(&table[id], w);", "gbflow_table_sum")
    return count, total


def table_counts(ids, size: int, weights=None):
    """See ``tables.table_counts`` (its NumPy branch is the twin): (size,) int64 counts or
    float64 weight sums of CuPy ``ids`` (any integer dtype), by atomic adds; no temporaries."""
    count, total = _table_kernels()
    size = int(size)
    if weights is None:
        table = cp.zeros(size, dtype=cp.uint64)
        if len(ids):
            count(ids, size, table)
        return table.view(cp.int64)
    table = cp.zeros(size, dtype=cp.float64)
    if len(ids):
        total(ids, cp.asarray(weights, dtype=cp.float64), size, table)
    return table


def sort_segments(ptr, keys, weights=None):
    """See numpy_kernels.sort_segments: one sort of (segment << 32 | key) on the device (CuPy's
    radix sort, stable), in place."""
    n = len(keys)
    if n == 0:
        return keys, weights
    ptr = cp.asarray(ptr, dtype=cp.int64)
    starts = table_counts(ptr[1:-1], n + 1)[:n]  # 1 where a segment starts (empty ones too)
    ids = cp.cumsum(starts, dtype=cp.uint64)
    ids <<= cp.uint64(32)
    ids |= keys
    if weights is None:
        ids.sort()
        keys[:] = ids.astype(cp.uint32)  # the low 32 bits
    else:
        order = cp.argsort(ids)
        keys[:] = keys[order]
        weights[:] = weights[order]
    return keys, weights


_SEGMENT_SUMS = r"""
extern "C" __global__ void segment_sums(const double* values, const long long* starts,
                                        long long n_segments, int k, double* out) {
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < n_segments * k;
         t += (long long)gridDim.x * blockDim.x) {
        long long s = t / k;
        int c = (int)(t % k);
        double total = 0.0;
        for (long long r = starts[s]; r < starts[s + 1]; ++r) total += values[r * k + c];
        out[t] = total;
    }
}
"""


@functools.lru_cache(maxsize=None)
def _segment_sums_kernel():
    return _raw_kernel(_SEGMENT_SUMS, "segment_sums", ("--fmad=false",))


def segment_sums(values, starts, out):
    """See numpy_kernels.segment_sums: one thread a (segment, column), its rows added in order
    (the twin's bits)."""
    n_segments = len(starts) - 1
    if n_segments <= 0 or out.size == 0:
        return out
    values = cp.ascontiguousarray(values, dtype=cp.float64)
    k = values.shape[1]
    _segment_sums_kernel()((_grid(n_segments * k)[0],), (_THREADS,),
                           (values, cp.ascontiguousarray(starts, dtype=cp.int64),
                            _i64(n_segments), np.int32(k), out))
    return out


@functools.lru_cache(maxsize=None)
def _ranking_kernel(name: str):
    return _raw_kernel((_CUDA_DIR / "ranking.cu").read_text(), name,
                       ("--std=c++17", "--fmad=false"))


def pair_order_counts(values, starts, query_of, out):
    """See numpy_kernels.pair_order_counts: one thread a place."""
    n = len(values)
    if n:
        _ranking_kernel("pair_order_counts")(
            _grid(n), (_THREADS,),
            (cp.ascontiguousarray(values, dtype=cp.float32),
             cp.ascontiguousarray(starts, dtype=cp.int64),
             cp.ascontiguousarray(query_of, dtype=cp.int64), _i64(n), out))
    return out


def lambda_pairs(y, s, e, gain, discount, inv_ideal, relevant, acc, starts, query_of, kind,
                 top_k, score_normalize, own, top):
    """See numpy_kernels.lambda_pairs: one thread a place for ``own``, one a (query, top place)
    for ``top``; the twin's operations in its order (no FMA)."""
    n, n_queries = len(y), len(starts) - 1
    arrays = [cp.ascontiguousarray(a, dtype=cp.float64)
              for a in (y, s, e, gain, discount, inv_ideal, relevant, acc)]
    starts = cp.ascontiguousarray(starts, dtype=cp.int64)
    if n:
        _ranking_kernel("lambda_own")(
            _grid(n), (_THREADS,),
            (*arrays, starts, cp.ascontiguousarray(query_of, dtype=cp.int64), _i64(n),
             np.int32(kind), _i64(top_k), np.int32(bool(score_normalize)), own))
    if n_queries:
        _ranking_kernel("lambda_top")(
            _grid(n_queries * top_k), (_THREADS,),
            (*arrays, starts, _i64(n_queries), np.int32(kind), _i64(top_k),
             np.int32(bool(score_normalize)), top))
    return own, top
