"""The map kernels' layouts on the GPU: outputs and inputs at every element offset of a 16-byte pack
(each combination, every size around a pack's edges), the poison around each output view intact;
the strided entry on random layouts (1 to 8 dims, broadcast, reversed, transposed, size-0 and
size-1 extents) and its contract's errors; views and broadcasts past 2^31 elements."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import pyew
from pyew import dtypes as dt
from pyew import library

from .helpers import filled, free_memory_for, params_of, poison, random_array
from .reference import assert_matches, evaluate
from .special_ref import bits_of

pytestmark = pytest.mark.gpu
DTYPES = ["float32", "float16", "bfloat16"]
SIZES = [0, 1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 33, 64, 65, 127, 129, 1000, 4093, 4099, 65541]
GUARD = 16                   # poisoned elements after each output view


def _op(name):
    op = library.get().manifest.op(name)
    if op is None:
        pytest.skip(f"the library has no op {name}")
    return op


def _kernel(op, dtype):
    return next(k for k in op.kernels if k.dtype.name == dtype)


def _input(x, off):
    """A device view `off` elements into an allocation of exactly off + n elements (junk before it)."""
    junk = np.full(off, np.nan if x.dtype.kind == "f" else 7).astype(x.dtype)
    return pyew.asarray(np.concatenate([junk, x]))[off:]


def _run_at(op, k, xs, offs, out_off):
    n = xs[0].size
    buf = poison(pyew.empty(out_off + n + GUARD, k.out_dtype.name))
    before = bits_of(buf.get())
    out = buf[out_off:out_off + n]
    assert getattr(pyew, op.name)(*[_input(x, o) for x, o in zip(xs, offs)], out=out, **params_of(op)) is out
    after = bits_of(buf.get())
    what = f"{op.name} {k.dtype.name} n={n} out+{out_off} in+{offs}"
    assert np.array_equal(after[:out_off], before[:out_off]) and np.array_equal(after[out_off + n:],
                                                                                before[out_off + n:]), \
        f"{what}: the poison around the output view was overwritten"
    ref = evaluate(op.ref, op.inputs, xs, params_of(op), k.dtype)
    assert_matches(out.get(), ref, k.out_dtype, what, rtol=op.rtol)


@pytest.mark.parametrize("dtype", DTYPES)
def test_one_input_at_every_offset_pair(dtype, rng):
    op = _op("relu")
    for n in SIZES:
        x = random_array(rng, n, dtype)
        for out_off, off in itertools.product(range(8), range(8)):
            _run_at(op, _kernel(op, dtype), [x], [off], out_off)


@pytest.mark.parametrize("dtype", DTYPES)
def test_two_inputs_at_every_offset_triple(dtype, rng):
    op = _op("add")
    for n in (0, 3, 17, 1029, 4099):
        xs = [random_array(rng, n, dtype) for _ in range(2)]
        for out_off, a, b in itertools.product(range(8), range(8), range(8)):
            _run_at(op, _kernel(op, dtype), xs, [a, b], out_off)


@pytest.mark.parametrize("name,dtype", [("to_float16", "float32"), ("to_float32", "float16")])
def test_casts_at_every_offset_pair(name, dtype, rng):
    op = _op(name)
    for n in SIZES:
        x = random_array(rng, n, dtype)
        for out_off, off in itertools.product(range(8), range(8)):
            _run_at(op, _kernel(op, dtype), [x], [off], out_off)


# ---- the strided entry, called with a layout: [ndim, shape..., each input's element strides...] ----

def _strided(op, dtype, shape, strides, out_off, lead, rng):
    """op's strided entry on inputs laid out by `strides` (each in an allocation spanning exactly
    the offsets the layout forms, its (0, ..., 0) element `lead` elements in), against numpy."""
    k, stream = _kernel(op, dtype), pyew.runtime.DEFAULT_STREAM
    n, size = int(np.prod(shape)), dt.BY_NAME[dtype].itemsize
    pointers, views, keep = [], [], []
    for s in strides:
        lo = sum((e - 1) * st for e, st in zip(shape, s) if st < 0) if n else 0
        hi = sum((e - 1) * st for e, st in zip(shape, s) if st > 0) if n else 0
        host = random_array(rng, lead - lo + hi + 1, dtype)
        keep.append(pyew.asarray(host))
        pointers.append(keep[-1].ptr + (lead - lo) * size)
        views.append(np.lib.stride_tricks.as_strided(host[lead - lo:], shape, [st * size for st in s]))
    buf = poison(pyew.empty(out_off + n + GUARD, k.out_dtype.name))
    before = bits_of(buf.get())
    layout = np.array([len(shape), *shape, *[st for s in strides for st in s]], np.int64)
    entry = k.entry("strided")
    library.get().check(entry.fn(buf.ptr + out_off * k.out_dtype.itemsize, *pointers, n, *params_of(op).values(),
                                 layout.ctypes.data, stream.handle, *stream.dims), entry.symbol)
    after = bits_of(buf.get())
    what = f"{op.name} {dtype} shape {shape} strides {strides} out+{out_off} inputs at +{lead}"
    assert np.array_equal(after[:out_off], before[:out_off]) and np.array_equal(after[out_off + n:],
                                                                                before[out_off + n:]), what
    ref = evaluate(op.ref, op.inputs, [np.ascontiguousarray(v).reshape(-1) for v in views], params_of(op), k.dtype)
    assert_matches(after[out_off:out_off + n].view(k.out_dtype.np), ref, k.out_dtype, what, rtol=op.rtol)


def _random_layout(rng, inputs):
    ndim = int(rng.integers(1, 9))
    shape = []
    for _ in range(ndim):
        e = int(rng.choice([1, 1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 32, 33, 64]))
        shape.append(0 if rng.random() < 1 / 60 else e if np.prod(shape) * e <= 200_000 else 1)
    strides = []
    for _ in range(inputs):
        order = rng.permutation(ndim) if rng.random() < 1 / 3 else np.arange(ndim)[::-1]   # innermost first
        s, acc = [0] * ndim, 1 + int(rng.random() < 0.25)                                  # sometimes every 2nd
        for d in order:
            if rng.random() < 0.25:
                continue                                                                   # broadcast
            s[d] = -acc if rng.random() < 0.2 else acc
            acc *= max(shape[d], 1) + int(rng.random() < 1 / 3)                            # padding
        strides.append(tuple(s))
    return tuple(shape), strides


@pytest.mark.parametrize("dtype", DTYPES + ["float64"])
def test_strided_entry_on_common_and_random_layouts(dtype, rng):
    relu, add = _op("relu"), _op("add")
    p = 16 // dt.BY_NAME[dtype].itemsize                      # elements of a 16-byte pack
    for m, w in itertools.product((1, 3, 64), (p, 4 * p, 96 * p)):
        _strided(add, dtype, (m, w), [(w, 1), (0, 1)], 0, 0, rng)          # row bias
        _strided(add, dtype, (m, w), [(w, 1), (1, 0)], 0, 0, rng)          # column bias
        _strided(add, dtype, (m, w), [(1, 0), (0, 1)], 0, 0, rng)          # outer
    for a, c, hw in itertools.product((1, 2, 5), (1, 3, 8), (p, 7 * p, 64 * p)):
        _strided(add, dtype, (a, c, hw), [(c * hw, hw, 1), (0, 1, 0)], 0, 0, rng)     # channel bias
    for n in (p, 1000 * p, 3, 1001):                                       # a scalar, aligned and not
        for out_off, lead in ((0, 0), (1, 0), (0, 1)):
            _strided(add, dtype, (n,), [(1,), (0,)], out_off, lead, rng)
    _strided(add, dtype, (33, 40), [(40, -1), (0, 1)], 0, 0, rng)          # reversed rows
    _strided(add, dtype, (40, 33), [(1, 40), (33, 1)], 0, 0, rng)          # transposed
    for _ in range(150):
        op = relu if rng.random() < 0.5 else add
        shape, strides = _random_layout(rng, len(op.inputs))
        _strided(op, dtype, shape, strides, int(rng.integers(0, 8)) if rng.random() < 1 / 3 else 0,
                 int(rng.integers(0, 8)), rng)


def test_strided_entry_refuses_bad_layouts():
    op = _op("relu")
    k, stream = _kernel(op, "float32"), pyew.runtime.DEFAULT_STREAM
    p = pyew.empty(64, "float32")
    lib = library.get()

    def rc(n, layout, entry="strided", x=None):
        arr = None if layout is None else np.array(layout, np.int64)
        args = [p.ptr, p.ptr if x is None else x, n] + ([arr.ctypes.data if arr is not None else 0]
                                                         if entry == "strided" else [])
        code = k.entry(entry).fn(*args, stream.handle, *stream.dims)
        return lib.error_name(code) if code else "cudaSuccess"
    assert rc(1, [0]) == "cudaErrorInvalidValue"                              # ndim 0
    assert rc(1, [9] + [1] * 9) == "cudaErrorInvalidValue"                    # ndim 9
    assert rc(5, [1, 4, 1]) == "cudaErrorInvalidValue"                        # n != product of the shape
    assert rc(4, [1, -4, 1]) == "cudaErrorInvalidValue"                       # a negative extent
    assert rc(-4, [1, 4, 1]) == "cudaErrorInvalidValue"                       # a negative n
    assert rc(4, None) == "cudaErrorInvalidValue"                             # no layout
    assert rc(0, [2, 3, 0, 1, 1]) == "cudaSuccess"                            # n = 0
    assert rc(4, None, "forward", p.ptr + 2) == "cudaErrorMisalignedAddress"  # not aligned to its element


# ---- past 2^31 elements: the 64-bit index paths --------------------------------------------------------

@pytest.mark.slow
def test_misaligned_view_and_row_bias_past_2_31(rng):
    """relu on a float16 view 3 elements into its buffer (the straddling loads) and a row bias
    (the strided packs kernel) over more than 2^31 elements, checked at the head, across 2^31 and
    at the tail."""
    n = 2**31 + 3 * 8192 + 77           # each chunk below inside the array, apart from the others
    free_memory_for(3 * 2 * n)
    x = filled(n + 3, "float16", -1.5)
    chunks = {c: random_array(rng, 8192, "float16") for c in (0, 2**31 - 4096, n - 8192)}
    assert all(c + 8192 <= n for c in chunks)     # the copies below stay inside x
    for c, h in chunks.items():
        pyew.runtime.copy_htod(x.ptr + 2 * (c + 3), h.ctypes.data, h.nbytes, pyew.runtime.DEFAULT_STREAM.cu)
    y = poison(pyew.empty(n, "float16"))
    pyew.relu(x[3:], out=y)
    for c, h in chunks.items():
        np.testing.assert_array_equal(y[c:c + h.size].get(), np.maximum(h, np.float16(0)), err_msg=f"relu at {c}")
    assert np.all(y[2**30:2**30 + 4096].get() == 0)
    del x, y
    rows, w = 2**31 // 4096 + 1, 4096
    free_memory_for(2 * 2 * rows * w)
    xs, b = filled(rows * w, "float16", 0.5).reshape(rows, w), random_array(rng, w, "float16")
    out = pyew.add(xs, pyew.asarray(b))
    for r in (0, 2**31 // w - 1, 2**31 // w, rows - 1):
        np.testing.assert_array_equal(out[r].get(), (np.float16(0.5) + b).astype(np.float16), err_msg=f"row {r}")
