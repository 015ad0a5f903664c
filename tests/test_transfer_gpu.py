"""The transfer engine on the GPU: arrays larger than its device budget, results bit-identical to
the one-shot path, two threads at once, an interrupt mid-stream, and the one-way copies."""
from __future__ import annotations

import math
import os
import signal
import threading
import time

import numpy as np
import pytest

import pyew

from .helpers import random_array, run_in_threads

pytestmark = pytest.mark.gpu


def test_array_four_times_the_device_budget(rng, transfer_limits):
    cap = 8 << 20
    transfer_limits(device_bytes=cap, small_bytes=0)
    n = 4 * cap // 4                                # float32: 4x the budget in the input alone
    x = random_array(rng, n, "float32")
    y = random_array(rng, n, "float32")
    pyew.synchronize()
    base = pyew.runtime.pool_usage()["used"]
    pyew.runtime.reset_pool_peak()
    got = pyew.add(x, y)
    np.testing.assert_array_equal(got, x + y)
    peak = pyew.runtime.pool_usage()["used_peak"] - base
    assert peak <= cap, f"the streamed call used {peak} bytes of device memory, over its {cap}"
    s = pyew.sigmoid(x)
    np.testing.assert_allclose(s, 1 / (1 + np.exp(-x.astype(np.float64))), rtol=1e-6)


def test_one_way_copies_of_any_layout(rng):
    a = random_array(rng, (1023, 517), "float16")
    for host in (a, a[::3, 1::2], a.T):
        d = pyew.asarray(host)
        np.testing.assert_array_equal(d.get(), host)
        out = np.zeros((host.shape[1], host.shape[0]), host.dtype).T       # a non-contiguous out
        d.get(out=out)
        np.testing.assert_array_equal(out, host)


def test_two_threads_at_once(rng):
    xs = [random_array(rng, 1 << 22, "float32") for _ in range(4)]
    got = [None] * 4

    def run(i):
        got[i] = pyew.mul(xs[i], xs[(i + 1) % 4])

    run_in_threads(run, 4)
    for i in range(4):
        np.testing.assert_array_equal(got[i], xs[i] * xs[(i + 1) % 4])


def test_interrupt_mid_stream_leaves_inputs_and_memory(rng, transfer_limits):
    transfer_limits(device_bytes=4 << 20, small_bytes=0, threads=2)
    x = random_array(rng, 1 << 25, "float32")
    keep = x.copy()
    pyew.synchronize()
    base = pyew.runtime.pool_usage()["used"]
    held = pyew.transfer.pinned_bytes_held()
    timer = threading.Timer(0.02, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            for _ in range(50):                       # until the interrupt lands mid-call
                pyew.gelu(x)
    finally:
        timer.cancel()
    time.sleep(0.01)
    pyew.synchronize()
    np.testing.assert_array_equal(x, keep)
    assert pyew.runtime.pool_usage()["used"] == base, "device scratch is returned"
    assert pyew.transfer.pinned_bytes_held() <= max(held, pyew.transfer_limits()["pinned_bytes"])
    np.testing.assert_array_equal(pyew.relu(x[:1000]), np.maximum(x[:1000], 0))   # still works


def test_scatter_bad_index_changes_nothing(rng):
    dst = random_array(rng, 1000, "float32")
    keep = dst.copy()
    with pytest.raises(IndexError):
        pyew.scatter_add(dst, np.array([1, 5000]), np.ones(2, np.float32))
    np.testing.assert_array_equal(dst, keep)
    d = pyew.asarray(dst)
    with pytest.raises(IndexError):
        pyew.scatter_add(d, pyew.asarray(np.array([1, -5000])), pyew.asarray(np.ones(2, np.float32)))
    np.testing.assert_array_equal(d.get(), keep)


def test_zero_size_and_scalar_only_calls():
    assert pyew.relu(np.zeros((3, 0), np.float32)).shape == (3, 0)
    r = pyew.add(2.0, 3)
    assert r.shape == () and r.dtype == np.float64 and float(r) == 5.0
    r = pyew.mul(np.float16(2), 3)
    assert r.dtype == np.float16 and float(r) == 6.0


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int64"])
def test_pinned_arrays_cross_in_one_dma(rng, dtype):
    """pyew.empty_pinned arrays (and their views at any offset) to and from the GPU: staged (small),
    by DMA above the staged-upload size, and past small_bytes; against the values."""
    from pyew import pinned
    size = pyew.dtypes.lookup(dtype).itemsize
    for n in (1, 1000, (40 << 20) // size + 3, (pyew.transfer_limits()["small_bytes"] + (4 << 20)) // size + 3):
        a = random_array(rng, n + 5, dtype)
        host = pyew.empty_pinned(n + 5, dtype)
        host[...] = a
        for off in (0, 1, 5):
            src = host[off:off + n]
            assert pinned.is_pinned(src)
            d = pyew.asarray(src)
            np.testing.assert_array_equal(d.get(), a[off:off + n])
            back = pyew.empty_pinned(n + 5, dtype)
            back[...] = 0
            assert d.get(out=back[off:off + n]) is not None
            np.testing.assert_array_equal(back[off:off + n], a[off:off + n])
            assert not back[:off].any() and not back[off + n:].any()


def test_page_locked_memory_of_another_library(cupy):
    from pyew import pinned
    n = (40 << 20) // 4
    mem = cupy.cuda.alloc_pinned_memory(4 * n)
    view = np.frombuffer(mem, np.float32, n)
    view[...] = np.arange(n)
    assert pinned.is_pinned(view) and not pinned.is_pinned(np.arange(n, dtype=np.float32))
    d = pyew.asarray(view)
    np.testing.assert_array_equal(d.get(), np.arange(n, dtype=np.float32))
    view[...] = 0
    d.get(out=view)
    np.testing.assert_array_equal(view, np.arange(n, dtype=np.float32))


def test_pinned_pool_reuses_blocks_and_keeps_its_limit(transfer_limits):
    from pyew import pinned
    transfer_limits(pinned_pool_bytes=64 << 20)
    a = pyew.empty_pinned(8 << 20)                      # 32 MiB
    ptr = a.ctypes.data
    del a
    b = pyew.empty_pinned(8 << 20)
    assert b.ctypes.data == ptr and pinned.held() <= 64 << 20
    c = pinned.pinned_or_empty((16 << 20,), np.float32)  # 64 MiB more would pass the limit
    assert not pinned.is_pinned(c)


def test_the_pools_default_counts_the_hosts_gpus():
    """The driver's list of GPUs, which the default pool limit divides by, holds at least the ones
    this process sees."""
    from pyew import pinned
    assert pinned._host_gpus() >= pyew.device_count() >= 1


def test_streamed_calls_over_pinned_operands(rng, transfer_limits):
    """numpy calls whose inputs and out= are page-locked stream by DMA from and to them: the same
    values as over pageable arrays, also mixed with a pageable operand and for a bitmask op."""
    transfer_limits(small_bytes=0, device_bytes=8 << 20, threads=3)
    n = 3 * (1 << 20) + 77
    a, b = random_array(rng, n, "float32"), random_array(rng, n, "float32")
    pa, pb, out = pyew.empty_pinned(n), pyew.empty_pinned(n), pyew.empty_pinned(n)
    pa[...], pb[...] = a, b
    out[...] = np.nan
    assert pyew.add(pa, pb, out=out) is out
    np.testing.assert_array_equal(out, a + b)
    np.testing.assert_array_equal(pyew.mul(pa, b), a * b)
    np.testing.assert_array_equal(pyew.gelu(pa), pyew.gelu(a))
    y, m = pyew.relu_mask(pa)
    y2, m2 = pyew.relu_mask(a)
    np.testing.assert_array_equal(y, y2)
    np.testing.assert_array_equal(m, m2)


def _poisoned_pool_block(n, dtype):
    """Leave a pool block of the size of an n-element result full of NaN (or 0x5A bytes), so a
    result that takes it and misses a part shows."""
    p = pyew.empty_pinned(n, dtype)
    p.view(np.uint8)[...] = 0xFF if np.dtype(p.dtype).kind == "f" else 0x5A
    del p


def _made_whole(monkeypatch, counted, n, dtype, fn, args, kw):
    """The same call in one part, its result in a poisoned pool block; then transfer._parts is
    counted again (monkeypatch's other patches are undone)."""
    from pyew import transfer
    monkeypatch.setattr(transfer, "_OVERLAP_PARTS", 1)
    _poisoned_pool_block(n, dtype)
    whole = fn(*args, **kw)
    monkeypatch.undo()
    monkeypatch.setattr(transfer, "_parts", counted)
    return whole


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int32"])
def test_one_shot_calls_in_parts_match_whole_calls(rng, dtype, monkeypatch):
    """numpy calls big enough to go in parts whose copies up and down overlap: ops of one, two
    and three inputs, an op with a param, a formula, a misaligned view, a page-locked input beside
    a pageable one, and sizes of one part, of two and four parts with tails; each result equals
    the same call made whole, element for element, and numpy's up to rounding."""
    from pyew import transfer
    size = np.dtype(dtype).itemsize
    part = transfer._OVERLAP_PART_BYTES // size
    seen = []
    real = transfer._parts

    def counted(*args):
        got = real(*args)
        seen.append(len(got))
        return got

    monkeypatch.setattr(transfer, "_parts", counted)
    floats = dtype != "int32"
    for n, parts in ((part + 3, 0), (2 * part + 255, 2), (4 * part + 1, 4), (6 * part + 101, 4)):
        a, b, c = (random_array(rng, n + 1, dtype) for _ in range(3))
        pinned_b = pyew.empty_pinned(n, dtype)
        pinned_b[...] = b[:n]
        x = a[1:]                                       # C-ordered, 1 element off its allocation
        cn = c[:n]
        calls = [(pyew.add, (x, pinned_b), {}), (pyew.where, (x > cn, x, pinned_b), {})]
        if floats:
            calls += [(pyew.sigmoid, (x,), {}), (pyew.elu, (x,), {"alpha": 0.5}),
                      (pyew.evaluate, ("where(x > 0, x * y, 0.5 * expm1(x)) + z",),
                       {"local_dict": {"x": x, "y": pinned_b, "z": cn}})]
        else:
            calls += [(pyew.bitwise_xor, (x, cn), {})]
        for fn, args, kw in calls:
            seen.clear()
            _poisoned_pool_block(n, dtype)
            got = fn(*args, **kw)
            assert max(seen, default=0) == parts          # a call of one part is not asked to split
            np.testing.assert_array_equal(got, _made_whole(monkeypatch, counted, n, dtype, fn, args, kw))
        x64, b64, c64 = (v.astype(np.float64) for v in (x, b[:n], c[:n]))
        np.testing.assert_array_equal(pyew.add(x, pinned_b), (x64 + b64).astype(dtype))
        if floats:
            want = 1 / (1 + np.exp(-x64))
            tol = {"float16": 1e-3, "float32": 1e-6, "float64": 1e-14}[dtype]
            np.testing.assert_allclose(pyew.sigmoid(x).astype(np.float64), want, rtol=tol, atol=tol * 1e-3)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
@pytest.mark.parametrize("shape,row,col", [((2051, 1024), (1024,), (2051, 1)), ((515, 4096), (1, 4096), (515, 1)),
                                           ((9, 300, 1000), (300, 1000), (9, 1, 1)),
                                           ((3, 700, 1000), (1, 1, 1000), (3, 700, 1)),
                                           ((8, 64, 48, 100), (64, 1, 1), (8, 1, 1, 1))])
def test_one_shot_calls_with_rows_and_numbers_in_parts(rng, dtype, shape, row, col, monkeypatch):
    """numpy calls with rows (ones, then the result's last dims, or a channel bias: ones, then the
    result's dims or ones), columns (its first dims, then ones) and Python numbers, big enough to go
    in runs of whole rows whose copies up and down overlap (the host plans of map ops, out=,
    formulas): each result equals the same call made
    whole, element for element, and numpy's, exactly for the exact ops and up to rounding for a
    formula; x a view 1 element off its allocation, results in poisoned pool blocks, a plan
    replayed with other numbers."""
    from pyew import transfer
    seen = []
    real = transfer._parts

    def counted(*args):
        got = real(*args)
        seen.append(got)
        return got

    monkeypatch.setattr(transfer, "_parts", counted)
    n, floats = math.prod(shape), dtype != "int32"
    period = math.prod(shape[len(shape) - len(row) + next(i for i, d in enumerate(row) if d != 1):])
    ones_from = len(shape) - next(i for i, d in enumerate(reversed(col)) if d != 1)
    col_period = math.prod(shape[ones_from:])
    x = random_array(rng, n + 1, dtype)[1:].reshape(shape)
    w, b = (random_array(rng, math.prod(row), dtype).reshape(row) for _ in range(2))
    c = random_array(rng, math.prod(col), dtype).reshape(col)
    o = np.empty(shape, dtype)
    v1, v2 = (2.5, -0.75) if floats else (3, -7)

    def calls():        # (function, args, keywords, numpy's result, the period of the call's runs)
        yield pyew.add, (x, w), {}, lambda: x + w, period
        yield pyew.add, (w, x), {"out": o}, lambda: w + x, period
        for v in (v1, v2):
            yield pyew.mul, (x, v), {}, lambda v=v: x * np.dtype(dtype).type(v), 1
        yield pyew.clip, (x, b, v1), {}, lambda: np.clip(x, b, np.dtype(dtype).type(v1)), period
        yield pyew.where, (x > w, x, b), {}, lambda: np.where(x > w, x, b), period
        yield pyew.sub, (c, x), {}, lambda: c - x, col_period
        yield pyew.clip, (x, c, b), {}, lambda: np.clip(x, c, b), max(period, col_period)
        yield pyew.evaluate, ("x * w + b + v",), {"local_dict": {"x": x, "w": w, "b": b, "v": v1}}, None, period

    for fn, args, kw, ref, every in calls():
        seen.clear()
        _poisoned_pool_block(n, dtype)
        o[...] = 0
        got = fn(*args, **kw)
        runs = [r for r in seen if r]
        assert runs and all(len(r) >= 2 and all(lo % every == 0 for lo, _ in r) and r[-1][1] == n for r in runs)
        got = got.copy()
        np.testing.assert_array_equal(got, _made_whole(monkeypatch, counted, n, dtype, fn, args, kw))
        if ref is not None:
            np.testing.assert_array_equal(got, ref())
        else:
            x64, w64, b64 = (a.astype(np.float64) for a in (x, w, b))
            want = x64 * w64 + b64 + v1
            if floats:
                tol = 2e-3 if dtype == "float16" else 1e-6
                np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol * 40)
            else:
                np.testing.assert_array_equal(got, want.astype(np.int32))
