"""The transfer engine on the GPU: arrays larger than its device budget, results bit-identical to
the one-shot path, two threads at once, an interrupt mid-stream, and the one-way copies."""
from __future__ import annotations

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
