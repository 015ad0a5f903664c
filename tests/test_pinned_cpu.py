"""pyew.empty_pinned and its pool, and the transfer engine's one-DMA path for page-locked arrays, on
the CPU stand-in for the CUDA runtime (tests/fake_cuda.py)."""
from __future__ import annotations

import gc
import threading

import ml_dtypes
import numpy as np
import pytest

import pyew
from pyew import devices, memory, pinned, streams, transfer

from .fake_cuda import NoCuda, device_view, install

MiB = 1 << 20


class _S:
    cu = 0
    handle = 0
    ordinal = 0
    dims = (4, 2048)
    reuse = None


@pytest.fixture
def fake(monkeypatch):
    f = install(monkeypatch)
    old = transfer.transfer_limits()
    transfer.set_transfer_limits(pinned_bytes=1 << 20, device_bytes=64 * 1024, threads=3, small_bytes=4096)
    yield f
    transfer.set_transfer_limits(**old)
    transfer.release()


def test_arrays_come_from_the_pool_and_go_back(fake):
    a = pyew.empty_pinned((3, 5))
    assert a.shape == (3, 5) and a.dtype == np.float32 and a.flags.writeable and a.flags.c_contiguous
    assert pinned.is_pinned(a) and fake.host_pinned(a.ctypes.data)
    a[...] = 7
    ptr = a.ctypes.data
    del a
    b = pyew.empty_pinned(15)                         # the same size class: the same block
    assert b.ctypes.data == ptr
    view = b[2:]
    del b
    c = pyew.empty_pinned(15)                         # the block is still in use through the view
    assert c.ctypes.data != ptr
    del view
    assert pyew.empty_pinned(16).ctypes.data == ptr   # and back once the view is gone
    for dtype in ("float16", "bfloat16", "int64", np.int32, ml_dtypes.bfloat16):
        d = pyew.empty_pinned((2, 4), dtype)
        assert d.dtype == np.dtype(dtype) and pinned.is_pinned(d)
    e = pyew.empty_pinned((0, 3))
    assert e.shape == (0, 3) and not pinned.is_pinned(e)


def test_a_free_block_of_the_same_size_serves_before_a_larger_one(fake):
    n = 1 << 18                                       # 1 MiB of float32: blocks of 1 and 2 MiB
    big, same = pyew.empty_pinned(2 * n), pyew.empty_pinned(n)
    big_ptr, same_ptr = big.ctypes.data, same.ctypes.data
    del big, same
    a = pinned.for_result((n,), np.float32)
    assert a.ctypes.data == same_ptr
    b = pinned.for_result((4, n // 4), np.float32)    # a block up to twice the size serves too
    assert b.ctypes.data == big_ptr and b.shape == (4, n // 4) and b.nbytes == 4 * n
    assert pinned.is_pinned(a) and pinned.is_pinned(b)
    b[...] = 3.0
    assert (np.asarray(b) == 3.0).all()


@pytest.mark.parametrize("shape,dtype,err,match", [
    ((-1,), "float32", ValueError, r"bad shape \(-1,\): negative dimensions are not allowed"),
    (("x",), "float32", TypeError, "bad shape .*cannot be interpreted as an integer"),
    (2.5, "float32", TypeError, "bad shape 2.5"),
    ((4,), "complex64", TypeError, "dtype 'complex64' is not one pyew supports"),
])
def test_bad_arguments_say_what_is_wrong(fake, shape, dtype, err, match):
    held = fake.pinned_bytes()
    with pytest.raises(err, match=match):
        pyew.empty_pinned(shape, dtype)
    assert fake.pinned_bytes() == held


def test_the_pool_keeps_at_most_its_limit(fake):
    transfer.set_transfer_limits(pinned_pool_bytes=5 * MiB)
    assert transfer.transfer_limits()["pinned_pool_bytes"] == 5 * MiB
    base = fake.pinned_bytes()
    a = pyew.empty_pinned(3 * MiB)                     # 12 MiB: past the limit
    assert pinned.held() == 0 and pinned.is_pinned(a)
    del a
    gc.collect()
    assert fake.pinned_bytes() == base                 # not kept: freed with the array
    b = pyew.empty_pinned(MiB // 4)                    # 1 MiB: kept
    assert pinned.held() == MiB
    c = pinned.pinned_or_empty((2 * MiB,), np.float32)  # 8 MiB would pass the limit: pageable
    assert not pinned.is_pinned(c) and c.shape == (2 * MiB,)
    d = pinned.pinned_or_empty((MiB // 2,), np.float32)  # 2 MiB fits beside b
    assert pinned.is_pinned(d) and pinned.held() == 3 * MiB
    del b, d
    assert pinned.held() == 3 * MiB and fake.pinned_bytes() == base + 3 * MiB   # kept, free
    transfer.set_transfer_limits(pinned_pool_bytes=0)  # free blocks past the limit go now
    assert pinned.held() == 0 and fake.pinned_bytes() == base


def test_a_block_freed_by_the_collector_under_the_pool_lock(fake, monkeypatch):
    """Freeing memory under the pool's lock can run the garbage collector, which can drop the last
    array over another block on the same thread: that block must come back without a deadlock."""
    transfer.set_transfer_limits(pinned_pool_bytes=4 * MiB)
    base = fake.pinned_bytes()
    a = pyew.empty_pinned(MiB // 2)                   # a 2 MiB block, then free in the pool
    del a
    cycle = [pyew.empty_pinned(MiB // 4)]             # a 1 MiB block only the collector frees
    cycle.append(cycle)
    del cycle
    free = fake.host.free

    def collecting_free(ptr):
        gc.collect()
        free(ptr)

    monkeypatch.setattr(fake.host, "free", collecting_free)
    got = []
    gc.disable()
    try:
        # 4 MiB more evicts the free 2 MiB block under the lock, and that collects the cycle
        t = threading.Thread(target=lambda: got.append(pyew.empty_pinned(MiB)), daemon=True)
        t.start()
        t.join(10)
    finally:
        gc.enable()
    if t.is_alive():
        monkeypatch.setattr(pinned, "_pool", pinned._Pool())   # the stuck one keeps its lock
        pytest.fail("the pool deadlocked")
    assert got[0].shape == (MiB,) and pinned.is_pinned(got[0])
    got.clear()
    transfer.release()
    assert pinned.held() == 0 and fake.pinned_bytes() == base


def test_a_block_returned_while_another_thread_holds_the_lock(fake, monkeypatch):
    """A block whose last array goes while another thread holds the pool's lock waits in the queue
    and is filed as soon as that thread lets go, not at some later pool call."""
    transfer.set_transfer_limits(pinned_pool_bytes=5 * MiB)
    a = pyew.empty_pinned(MiB // 2)                   # a 2 MiB block, then free in the pool
    del a
    box = [pyew.empty_pinned(MiB // 8)]               # a 512 KiB block another thread lets go
    free, waiting = fake.host.free, []

    def free_while_another_thread_returns(ptr):
        t = threading.Thread(target=box.clear)
        t.start()
        t.join(10)
        waiting.append(len(pinned._pool.returned))
        free(ptr)

    monkeypatch.setattr(fake.host, "free", free_while_another_thread_returns)
    c = pyew.empty_pinned(MiB)                        # 4 MiB more: evicts the free block under the lock
    assert waiting == [1], "the returned block should have waited for the lock"
    assert not pinned._pool.returned and len(pinned._pool.free.get(MiB // 2, [])) == 1
    assert pinned.held() == 4 * MiB + MiB // 2 and pinned.is_pinned(c)


@pytest.mark.parametrize("gpus,limit", [(None, 8 << 30), (1, 8 << 30), (8, 1 << 30), (512, 256 << 20)])
def test_the_default_limit_is_shared_by_the_hosts_gpus(monkeypatch, tmp_path, gpus, limit):
    """An eighth of 64 GiB, divided by the GPUs the driver lists (dask-cuda runs a process and a
    pool per GPU), at least 256 MiB; counted without CUDA."""
    monkeypatch.setattr(pinned, "_physical_memory", lambda: 64 << 30)
    listing = tmp_path / "gpus"
    if gpus is not None:
        listing.mkdir()
        for i in range(gpus):
            (listing / f"0000:{i:02x}:00.0").mkdir()
    real_listdir = pinned.os.listdir
    monkeypatch.setattr(pinned.os, "listdir",
                        lambda p: real_listdir(listing) if p == "/proc/driver/nvidia/gpus" else real_listdir(p))
    monkeypatch.setattr(devices, "cuda", NoCuda())          # the limit must not start CUDA
    assert pinned._default_limit() == limit
    assert pinned._Pool().limit == limit


def test_reading_and_setting_limits_leaves_cuda_alone(monkeypatch):
    """A process may set the limits and then fork workers: that must not have started CUDA."""
    transfer.release()                  # memory earlier tests left to the engine (on a GPU host)
    for part in (devices, streams, memory, pinned):
        monkeypatch.setattr(part, "cuda", NoCuda())
    monkeypatch.setattr(pinned, "_pool", pinned._Pool())
    old = transfer.transfer_limits()
    assert old["pinned_pool_bytes"] == pinned._default_limit()
    transfer.set_transfer_limits(threads=2, pinned_pool_bytes=64 << 20)
    assert transfer.transfer_limits()["pinned_pool_bytes"] == 64 << 20
    transfer.set_transfer_limits(**old)
    assert transfer.transfer_limits() == old


def test_pinned_arrays_cross_in_one_copy(fake):
    n = 100_003
    x = pyew.empty_pinned(n)
    x[...] = np.arange(n, dtype=np.float32)
    d = fake.malloc(4 * n, _S())
    copies = fake.copies
    transfer.to_device(x, d, _S())
    assert fake.copies == copies + 1
    np.testing.assert_array_equal(device_view(d, np.float32, (n,)), x)
    out = pyew.empty_pinned(n)
    transfer.to_host(d, out, _S())
    assert fake.copies == copies + 2
    np.testing.assert_array_equal(out, x)
    page = np.empty(n, np.float32)                     # pageable: staged through the ring in blocks
    transfer.to_host(d, page, _S())
    assert fake.copies > copies + 3
    np.testing.assert_array_equal(page, x)
    strided = pyew.empty_pinned(2 * n)[::2]            # pinned but not contiguous: staged
    copies = fake.copies
    transfer.to_host(d, strided, _S())
    assert fake.copies > copies + 1
    np.testing.assert_array_equal(strided, x)


def test_device_arrays_and_pinned_arrays(fake):
    a = pyew.empty_pinned((300, 100), "float16")
    a[...] = np.random.default_rng(0).standard_normal(a.shape)
    d = pyew.asarray(a)
    out = pyew.empty_pinned(a.shape, "float16")
    assert d.get(out=out) is out
    np.testing.assert_array_equal(out, a)


def test_streamed_calls_read_and_write_pinned_operands_in_place(fakes, monkeypatch):
    """A numpy call over page-locked inputs and out= streams its blocks with DMA from and to them,
    no staging; a pageable operand beside them is still staged. Results as numpy gives them."""
    from pyew import runtime as rt
    hosts = []
    up, down = rt.copy_htod, rt.copy_dtoh
    monkeypatch.setattr(rt, "copy_htod", lambda d, s, n, st: (hosts.append(s), up(d, s, n, st)))
    monkeypatch.setattr(rt, "copy_dtoh", lambda d, s, n, st: (hosts.append(d), down(d, s, n, st)))
    n = 50_001
    rng = np.random.default_rng(1)
    x, out = pyew.empty_pinned(n), pyew.empty_pinned(n)
    x[...] = rng.standard_normal(n)
    y = rng.standard_normal(n).astype(np.float32)          # pageable
    assert pyew.add(x, y, out=out) is out
    np.testing.assert_array_equal(out, x + y)

    def inside(a):
        return sum(a.ctypes.data <= p < a.ctypes.data + a.nbytes for p in hosts)
    assert inside(x) > 1 and inside(out) > 1 and inside(y) == 0    # several blocks each; y staged
    ref = 1 / (1 + np.exp(-x.astype(np.float64)))
    hosts.clear()
    got = pyew.sigmoid(x)                                   # a new result: from the pool, written in place
    np.testing.assert_allclose(got, ref, rtol=1e-6)
    assert pinned.is_pinned(got) and inside(x) > 1 and inside(got) > 1
    old = pyew.set_transfer_limits(pinned_pool_bytes=0)     # no room in the pool: pageable, staged out
    try:
        hosts.clear()
        got = pyew.sigmoid(x)
        np.testing.assert_allclose(got, ref, rtol=1e-6)
        assert not pinned.is_pinned(got) and inside(x) > 1 and inside(got) == 0
    finally:
        pyew.set_transfer_limits(**old)


def test_one_shot_results_and_gets_land_in_pool_memory(fakes, monkeypatch):
    """A new result of RESULT_BYTES or more comes from the pool, also below small_bytes (one shot)
    and from DeviceArray.get(): the copy down writes it by DMA, with nothing staged; smaller ones
    are plain numpy arrays, which CUDA's copy from pageable memory writes itself."""
    from pyew import runtime as rt
    downs = []
    down = rt.copy_dtoh
    monkeypatch.setattr(rt, "copy_dtoh", lambda d, s, n, st: (downs.append(d), down(d, s, n, st)))
    old = transfer.set_transfer_limits(small_bytes=4 * pinned.RESULT_BYTES, pinned_bytes=64 << 20)
    try:
        n = pinned.RESULT_BYTES // 4                               # float32: just RESULT_BYTES
        x = np.random.default_rng(2).standard_normal(n).astype(np.float32)
        ref = 1 / (1 + np.exp(-x.astype(np.float64)))
        d = pyew.asarray(x)
        for call, want in ((lambda: pyew.sigmoid(x), ref), (d.get, x)):
            downs.clear()
            got = call()
            assert pinned.is_pinned(got) and downs == [got.ctypes.data]
            np.testing.assert_allclose(got, want, rtol=1e-6)
        downs.clear()
        small = pyew.sigmoid(x[: n // 2 - 1])
        assert not pinned.is_pinned(small) and downs == [small.ctypes.data]
        np.testing.assert_allclose(small, ref[: n // 2 - 1], rtol=1e-6)
        ups = []
        up = rt.copy_htod
        monkeypatch.setattr(rt, "copy_htod", lambda d, s, n, st: (ups.append(s), up(d, s, n, st)))
        p = pyew.empty_pinned(n)
        p[...] = x
        d = pyew.asarray(p)                     # below small_bytes: staged, so the caller need not wait
        assert ups and p.ctypes.data not in ups
        np.testing.assert_array_equal(d.get(), x)
    finally:
        transfer.set_transfer_limits(**old)


def test_a_block_too_large_for_the_pool_evicts_nothing(fake):
    """A result the pool cannot keep even with its free blocks gone leaves them in place (freeing
    them would only make the next calls lock memory again) and comes back pageable; one that fits
    once they are gone evicts them; a free block up to twice the size serves a smaller request."""
    transfer.set_transfer_limits(pinned_pool_bytes=8 * MiB)
    blocks = [pyew.empty_pinned(MiB // 4) for _ in range(3)]      # three 1 MiB blocks, then free
    ptrs = {b.ctypes.data for b in blocks}
    del blocks
    assert pinned.held() == 3 * MiB
    big = pinned.pinned_or_empty((4 * MiB,), np.float32)          # 16 MiB: past the limit
    assert not pinned.is_pinned(big) and pinned.held() == 3 * MiB
    again = pyew.empty_pinned(MiB // 4)
    assert again.ctypes.data in ptrs                             # the free blocks stayed
    del again
    fits = pinned.pinned_or_empty((MiB + MiB // 2,), np.float32)  # 6 MiB: fits once 1 MiB goes
    assert pinned.is_pinned(fits) and pinned.held() <= 8 * MiB
    del fits
    half = pinned.pinned_or_empty((MiB // 2 + 1,), np.float32)    # just over 2 MiB: the 6 MiB block is too big
    bigger = pyew.empty_pinned(MiB)                               # 4 MiB: the free 6 MiB block serves
    assert pinned.is_pinned(half) and pinned.is_pinned(bigger) and pinned.held() <= 8 * MiB


def test_pool_views_are_known_pinned_without_asking_cuda(fake, monkeypatch):
    """A result from the pool, and views of it, are page-locked without a CUDA query per call;
    pageable arrays are still asked about."""
    asked = []
    real = pinned.cuda.pinned
    monkeypatch.setattr(pinned.cuda, "pinned", lambda ptr: asked.append(ptr) or real(ptr))
    r = pinned.for_result((64, 1024), np.float32)
    for v in (r, r.reshape(-1), r[3:], r.view(np.int32), r.T):
        assert pinned.is_pinned(v)
    assert pinned.is_direct(r)
    assert asked == []
    assert not pinned.is_pinned(np.ones(1 << 16, np.float32))
    assert len(asked) == 1
