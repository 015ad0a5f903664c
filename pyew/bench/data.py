"""Fresh random input data on the device, never zeros.

Values are drawn from a new seed each run (the JSON records it): floats are +-[0.1, 4) with a random
sign, so branchy ops (relu, elu, hardshrink, gelu) take both sides; integers are +-[1, 1000).
Drawing 2^28 values per input on the host would cost seconds per dtype, so a block of up to 2^22
values is uploaded and tiled across the buffer with device-to-device copies: the memory system sees
the same traffic (caches key on addresses, not values) and the value mix is the same everywhere.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from .. import runtime as rt
from ..array import DeviceArray, empty

BLOCK = 1 << 22
ALIGN = 256     # elements between rotated views: 256 B or more, so every view allows 16-byte packs


def random_host(rng: np.random.Generator, dtype: str, count: int) -> np.ndarray:
    info = dt.BY_NAME[dtype]
    sign = rng.integers(0, 2, size=count, dtype=np.int8) * 2 - 1
    if info.kind == "int":
        return (rng.integers(1, 1000, size=count, dtype=np.int64) * sign).astype(info.np)
    work = np.float64 if info.name == "float64" else np.float32
    mag = rng.random(count, dtype=work) * work(3.9) + work(0.1)
    return (mag * sign).astype(info.np)


def fill_random(a: DeviceArray, rng: np.random.Generator) -> DeviceArray:
    """Overwrite `a` with random values (a block, tiled by doubling device-to-device copies)."""
    if a.size == 0:
        return a
    name = dt.lookup(a.dtype).name
    block = random_host(rng, name, min(a.size, BLOCK))
    cu = rt.DEFAULT_STREAM.cu
    # from pageable memory the copy has read `block` when it returns, so block may go after it
    rt.copy_htod(a.ptr, block.ctypes.data, block.nbytes, cu)
    done, total = block.nbytes, a.nbytes
    while done < total:
        step = min(done, total - done)
        rt.copy_dtod(a.ptr + done, a.ptr, step, cu)
        done += step
    return a


def random_host_n(rng: np.random.Generator, dtype: str, n: int) -> np.ndarray:
    """n random values in a numpy array (the same value mix as random_host): a block of up to
    BLOCK values drawn, then tiled, so 2^28 values cost a memory copy, not seconds of drawing."""
    block = random_host(rng, dtype, min(n, BLOCK))
    if n <= block.size:
        return block
    out = np.empty(n, block.dtype)
    out[:block.size] = block
    done = block.size
    while done < n:
        step = min(done, n - done)
        out[done:done + step] = out[:step]
        done += step
    return out


def random_device(rng: np.random.Generator, dtype: str, shape) -> DeviceArray:
    return fill_random(empty(shape, dtype), rng)


def stride(n: int) -> int:
    """Elements from one rotated view's start to the next's."""
    return -(-n // ALIGN) * ALIGN


class Pool:
    """One device buffer that rotated views of n elements are cut from: view(slot, n). Sized to
    hold the largest n and at least `span_bytes` (4x L2), so small sizes can rotate widely."""

    def __init__(self, dtype: str, max_n: int, span_bytes: int, rng=None):
        self.dtype = dtype
        isz = dt.BY_NAME[dtype].itemsize
        self.elems = max(stride(max_n), stride(-(-span_bytes // isz)))
        self.array = empty(self.elems, dtype)
        if rng is not None:
            fill_random(self.array, rng)

    def capacity(self, n: int) -> int:
        return max(1, self.elems // stride(n))

    def view(self, slot: int, n: int) -> DeviceArray:
        start = (slot % self.capacity(n)) * stride(n)
        return self.array[start:start + n]

    @property
    def nbytes(self) -> int:
        return self.array.nbytes
