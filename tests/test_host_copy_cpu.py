"""libew's host copies split over spinning workers (libew/host_copy.cu), which pyew's one-shot
transfers stage numpy arrays with: run for real on the CPU, against the built library."""
from __future__ import annotations

import ctypes
import multiprocessing
import threading
import time

import numpy as np
import pytest

from pyew import library, transfer
from pyew.errors import LibraryError

from .helpers import run_in_threads

KIB = 1 << 10


@pytest.fixture(scope="module")
def lib():
    try:
        return library.get()
    except LibraryError as e:
        pytest.skip(f"libew.so not usable: {e}")


def _stats(lib) -> tuple[int, int]:
    """(workers started, parts the workers copied) in this process."""
    f = lib.cdll.ew_host_copy_stats
    f.restype, f.argtypes = ctypes.c_int, [ctypes.POINTER(ctypes.c_int64)]
    out = (ctypes.c_int64 * 2)()
    assert f(out) == 0
    return out[0], out[1]


def _woken(lib) -> int:
    """The workers ew_host_copy_wake woke, in this process."""
    f = lib.cdll.ew_host_copy_woken
    f.restype, f.argtypes = ctypes.c_int64, []
    return f()


def _until_a_worker_copies(lib, nbytes=32 << 20, threads=4, seconds=60.0, pause=0.002) -> tuple[bool, bool]:
    """Copies until the workers have copied a part: the caller takes every part no worker has
    claimed yet, so on a loaded host a worker may need several copies to get one. (Whether a worker
    copied within `seconds`, every copy exact.)"""
    src = np.random.default_rng(5).integers(0, 256, nbytes, dtype=np.uint8)
    dst = np.zeros_like(src)
    before = _stats(lib)[1]
    exact, end = True, time.monotonic() + seconds
    while True:
        dst[:] = 0
        lib.host_copy(dst.ctypes.data, src.ctypes.data, nbytes, threads)
        exact &= bool((dst == src).all())
        if _stats(lib)[1] > before:
            return True, exact
        if time.monotonic() > end:
            return False, exact
        time.sleep(pause)


@pytest.fixture
def spin(lib):
    f = lib.cdll.ew_host_copy_spin_us
    f.restype, f.argtypes = ctypes.c_int64, [ctypes.c_int64]
    old = f(-1)
    yield f
    f(old)


@pytest.fixture(params=[True, False], ids=["streaming stores", "cached stores"])
def streaming(lib, request):
    """Copies with non-temporal stores (the default, on x86-64) and with plain ones."""
    f = lib.cdll.ew_host_copy_streaming
    f.restype, f.argtypes = ctypes.c_int, [ctypes.c_int]
    old = f(int(request.param))
    yield request.param
    f(old)


def _copy_into_middle(lib, nbytes: int, parts: int, rng) -> tuple[int, np.ndarray, np.ndarray]:
    """Copy nbytes of random data into the middle of a poisoned buffer, at odd offsets on both sides."""
    src = rng.integers(0, 256, nbytes + 3, dtype=np.uint8)[3:]
    dst = np.full(nbytes + 64, 0xA5, np.uint8)
    used = lib.host_copy(dst[17:].ctypes.data, src.ctypes.data, nbytes, parts)
    return used, src, dst


@pytest.mark.parametrize("nbytes", [1, 15, 63, 4095, 4096, 4096 + 77, 256 * KIB - 1, 512 * KIB, 3 * 1024 * KIB + 13,
                                    9 * 1024 * KIB + 4097])
@pytest.mark.parametrize("parts", [1, 2, 3, 8, 64, 1000])
def test_copies_every_byte_and_nothing_else(lib, streaming, nbytes, parts):
    used, src, dst = _copy_into_middle(lib, nbytes, parts, np.random.default_rng(nbytes + parts))
    np.testing.assert_array_equal(dst[17:17 + nbytes], src)
    assert (dst[:17] == 0xA5).all() and (dst[17 + nbytes:] == 0xA5).all()
    # parts of at least 256 KiB, at most four a thread, the library's threads capped at 64
    assert 1 <= used <= max(1, min(4 * min(parts, 64), nbytes // (256 * KIB)))
    assert (used > 1) == (parts > 1 and nbytes >= 512 * KIB)


def test_splits_a_large_copy(lib):
    used, src, dst = _copy_into_middle(lib, 8 * 1024 * KIB, 4, np.random.default_rng(1))
    assert used == 16
    np.testing.assert_array_equal(dst[17:17 + src.size], src)


def test_nothing_to_copy(lib):
    dst = np.full(16, 7, np.uint8)
    assert lib.host_copy(dst.ctypes.data, dst.ctypes.data, 0, 8) == 0
    assert lib.host_copy(dst.ctypes.data, dst.ctypes.data, -5, 8) == 0
    assert (dst == 7).all()


def test_workers_that_went_to_sleep_wake_up(lib, spin):
    spin(0)                                  # workers sleep as soon as they finish a part
    rng = np.random.default_rng(2)
    for _ in range(20):
        used, src, dst = _copy_into_middle(lib, 2 * 1024 * KIB, 8, rng)
        assert used == 8
        np.testing.assert_array_equal(dst[17:17 + src.size], src)
    time.sleep(0.05)                         # every worker asleep now
    copied, exact = _until_a_worker_copies(lib)
    assert exact and copied, "no worker woke up to copy a part"
    assert _stats(lib)[0] >= 3


def test_spinning_workers_take_parts(lib, spin):
    spin(200_000)                            # copies back to back, the workers never asleep between them
    copied, exact = _until_a_worker_copies(lib, pause=0.0)
    assert exact and copied, "no worker copied a part"


def test_spin_setting_round_trips(spin):
    assert spin(1234) >= 0
    assert spin(-1) == 1234


def test_streaming_setting_round_trips(lib, streaming):
    f = lib.cdll.ew_host_copy_streaming
    assert f(-1) == int(streaming)
    assert f(int(not streaming)) == int(streaming)
    assert f(-1) == int(not streaming)


@pytest.mark.parametrize("offset", [0, 1, 8, 15])
def test_every_destination_alignment(lib, streaming, offset):
    """The stores past the caches need 16-byte aligned addresses: the bytes before the first such
    address, and after the last whole 64-byte run, are copied apart."""
    rng = np.random.default_rng(offset)
    src = rng.integers(0, 256, 600 * KIB + 5, dtype=np.uint8)
    dst = np.full(src.size + 64, 0xA5, np.uint8)
    lib.host_copy(dst[offset:].ctypes.data, src.ctypes.data, src.size, 1)
    np.testing.assert_array_equal(dst[offset:offset + src.size], src)
    assert (dst[:offset] == 0xA5).all() and (dst[offset + src.size:] == 0xA5).all()


def test_threads_copying_at_once(lib):
    """Copies from several threads at once: one gets the workers, the others copy alone; all complete."""
    rng = np.random.default_rng(3)
    srcs = [rng.integers(0, 256, 3 * 1024 * KIB, dtype=np.uint8) for _ in range(6)]
    dsts = [np.zeros_like(s) for s in srcs]
    errors = []

    def go(i):
        try:
            for _ in range(10):
                dsts[i][:] = 0
                lib.host_copy(dsts[i].ctypes.data, srcs[i].ctypes.data, srcs[i].nbytes, 8)
                np.testing.assert_array_equal(dsts[i], srcs[i])
        except Exception as e:      # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=go, args=(i,)) for i in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors


def _child_copy(q):
    lib = library.get()
    started_at_fork = _stats(lib)
    src = np.arange(1 << 20, dtype=np.uint32)
    dst = np.zeros_like(src)
    used = lib.host_copy(dst.ctypes.data, src.ctypes.data, src.nbytes, 8)
    copied, exact = _until_a_worker_copies(lib)
    q.put((started_at_fork, used, bool((dst == src).all()) and exact, copied, _stats(lib)[0]))


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_starts_its_own_workers(lib):
    src = np.ones(1 << 20, np.uint32)
    dst = np.zeros_like(src)
    assert lib.host_copy(dst.ctypes.data, src.ctypes.data, src.nbytes, 8) == 16       # workers in the parent
    assert (dst == 1).all()
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child_copy, args=(q,), daemon=True)
    p.start()
    try:
        at_fork, used, equal, copied, started = q.get(timeout=180)
        p.join(timeout=60)
    finally:
        if p.is_alive():                       # a child that hangs must not hang the test run
            p.kill()
            p.join(5)
    assert p.exitcode == 0 and used == 16 and equal
    assert at_fork == (0, 0), "the child inherited the parent's workers or counts"
    assert copied and started >= 1, "no worker of the child's own copied a part"


def _counting(f, calls):
    def g(*a):
        calls.append(a)
        return f(*a)
    return g


@pytest.mark.parametrize("threads", [8, 1])
@pytest.mark.parametrize("case", ["contiguous", "strided", "other dtype", "small"])
def test_staging_copy_matches_numpy(lib, case, threads, monkeypatch):
    """transfer's staging copy: libew's where it can be (split over the workers, or on one thread
    where the host allows one), numpy's copy elsewhere; the same values either way."""
    rng = np.random.default_rng(4)
    src = rng.standard_normal(1 << 19).astype(np.float32)          # 2 MiB
    dst = np.full_like(src, np.nan)
    if case == "strided":
        src, dst = src[::2], dst[: src.size // 2]
    elif case == "other dtype":
        dst = np.full(src.shape, np.nan, np.float64)
    elif case == "small":
        src, dst = src[:1000], dst[:1000]
    native = []
    monkeypatch.setattr(lib, "host_copy", _counting(lib.cdll.ew_host_copy, native))
    monkeypatch.setattr(transfer, "_copy_threads", threads)   # as on a host with that many CPUs
    transfer._copy(dst, src)
    np.testing.assert_array_equal(dst, src.astype(dst.dtype))
    # libew's copy only where both sides are one C-ordered run of one dtype, and large
    assert bool(native) == (case == "contiguous")
    assert all(a[3] == min(threads, transfer.transfer_limits()["threads"]) for a in native)


@pytest.mark.parametrize("nbytes", [1, 4096 + 3, 64 * KIB, 64 * KIB + 1, 3 * 1024 * KIB + 13, 80 * 1024 * KIB + 5])
def test_a_copy_in_order_tells_how_far_it_is_done(lib, nbytes):
    """A copy begun in order reports the bytes done from its start: at least what is asked for,
    growing, every reported byte already in place; another copy meanwhile (the workers busy) is
    done alone and exact; once all is done the workers take the next copy."""
    rng = np.random.default_rng(nbytes)
    src = rng.integers(0, 256, nbytes + 3, dtype=np.uint8)[3:]
    dst = np.full(nbytes + 64, 0xA5, np.uint8)
    other_src = rng.integers(0, 256, 1 << 20, dtype=np.uint8)
    other = np.zeros_like(other_src)
    going = lib.host_copy_begin(dst[17:].ctypes.data, src.ctypes.data, nbytes, 4, 1)
    try:
        assert going == (nbytes > 64 * KIB), "a copy of one part is done at once"
        done = nbytes if not going else 0
        while done < nbytes:
            if done == 0:      # a copy from another caller while this one goes on: alone, at once
                assert lib.host_copy_begin(other.ctypes.data, other_src.ctypes.data, other.nbytes, 4, 1) == 0
                np.testing.assert_array_equal(other, other_src)
                # another thread has no copy of its own to ask about or finish
                asked: list = []
                run_in_threads(lambda i, out=asked: out.append((lib.host_copy_ready(1), lib.host_copy_finish())), 2)
                assert asked == [(-1, 0), (-1, 0)]
            want = min(nbytes, done + 100 * KIB)
            got = lib.host_copy_ready(want)
            assert want <= got <= nbytes
            np.testing.assert_array_equal(dst[17:17 + got], src[:got])
            done = got
    finally:
        lib.host_copy_finish()
    assert lib.host_copy_ready(nbytes) == -1 and lib.host_copy_finish() == 0, "the copy is over"
    np.testing.assert_array_equal(dst[17:17 + nbytes], src)
    assert (dst[:17] == 0xA5).all() and (dst[17 + nbytes:] == 0xA5).all()
    other[:] = 0
    assert lib.host_copy_begin(other.ctypes.data, other_src.ctypes.data, other.nbytes, 4, 1) == 1
    assert lib.host_copy_ready(other.nbytes) == other.nbytes
    np.testing.assert_array_equal(other, other_src)


def test_a_nudge_wakes_sleeping_workers_before_a_copy(lib, spin):
    """ew_host_copy_wake wakes the workers a copy of that many threads would ask for, and only
    those that sleep (none with one thread); a copy right after is exact."""
    spin(0)                                  # workers sleep as soon as they finish a part
    _copy_into_middle(lib, 4 * 1024 * KIB, 4, np.random.default_rng(3))
    assert lib.host_copy_wake(1) == 0
    deadline = time.monotonic() + 10
    woke = 0
    while not woke and time.monotonic() < deadline:
        time.sleep(0.01)                     # every worker asleep by now, most likely
        before = _woken(lib)
        woke = lib.host_copy_wake(4)
    assert 1 <= woke <= 3, "no sleeping worker to wake"
    while _woken(lib) < before + woke and time.monotonic() < deadline:
        time.sleep(0.001)
    assert _woken(lib) >= before + woke, "a worker notified did not wake"
    used, src, dst = _copy_into_middle(lib, 2 * 1024 * KIB, 4, np.random.default_rng(4))
    np.testing.assert_array_equal(dst[17:17 + src.size], src)


def test_a_copy_begun_and_left_is_finished_by_its_thread(lib):
    """ew_host_copy_finish completes the copy its thread began and stopped asking about (a caller
    leaving on an exception): every byte is in place when it returns and the workers take the next
    copy; without a copy of its own it does nothing."""
    src = np.random.default_rng(9).integers(0, 256, 24 << 20, dtype=np.uint8)
    dst = np.zeros_like(src)
    assert lib.host_copy_finish() == 0
    assert lib.host_copy_begin(dst.ctypes.data, src.ctypes.data, src.nbytes, 4, 1) == 1
    assert lib.host_copy_finish() == src.nbytes
    np.testing.assert_array_equal(dst, src)
    assert lib.host_copy_begin(dst.ctypes.data, src.ctypes.data, 1 << 20, 4, 1) == 1, "the pool stayed taken"
    assert lib.host_copy_ready(1 << 20) == 1 << 20


def _child_finish(q, dst, src) -> None:
    lib = library.get()
    got = lib.host_copy_finish()
    q.put((got, bool(np.array_equal(dst, src)), lib.host_copy_ready(1)))


def test_a_child_forked_in_the_middle_of_its_copy_finishes_it_alone(lib):
    """A process forked by the thread whose copy is in progress: the child has none of the workers
    that held parts, and finishing the copy there copies it all again, exact, instead of waiting
    for them; the parent's copy goes on as before."""
    src = np.random.default_rng(11).integers(0, 256, 64 << 20, dtype=np.uint8)
    dst = np.zeros_like(src)
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    assert lib.host_copy_begin(dst.ctypes.data, src.ctypes.data, src.nbytes, 8, 1) == 1
    try:
        p = ctx.Process(target=_child_finish, args=(q, dst, src), daemon=True)
        p.start()
    finally:
        assert lib.host_copy_finish() == src.nbytes
    try:
        got, equal, after = q.get(timeout=180)
        p.join(timeout=60)
    finally:
        if p.is_alive():                       # a child that hangs must not hang the test run
            p.kill()
            p.join(5)
    assert p.exitcode == 0 and got == src.nbytes and equal and after == -1
    np.testing.assert_array_equal(dst, src)
