"""Several GPUs without a GPU: device selection, arrays that know their device, calls that run on
their operands' device and restore the caller's, and the errors for mixed devices, over the
runtime stand-ins of tests/fake_cuda.py on a simulated machine of two GPUs."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import pyew
from pyew import dlpack, library, transfer
from pyew import runtime as rt

from .fake_cuda import device_view, install_gpus
from .helpers import manifest_ops

needs_lib = pytest.mark.skipif(not manifest_ops(), reason="libew.so not built (make all)")


@pytest.fixture
def two(monkeypatch, request):
    # the kernels' stand-ins where a library is built (the calls' tests need them), else the runtime's alone
    request.getfixturevalue("fakes" if manifest_ops() else "fake_runtime")
    cuda, api = install_gpus(monkeypatch, 2)
    launches = []
    real = library.launch

    def launch(entry, args, stream):
        launches.append((entry.symbol, api.current(), stream.ordinal))
        real(entry, args, stream)

    monkeypatch.setattr(library, "launch", launch)
    transfer.release()
    yield cuda, api, launches
    transfer.release()


def on_gpu(a, device):
    """A DeviceArray holding numpy array a on GPU `device` (copied through the fake transfer path)."""
    return pyew.asarray(a, device=device)


def test_device_objects(two):
    assert pyew.device_count() == 2
    assert pyew.Device(1).id == 1 and pyew.Device(pyew.Device(1)) == pyew.Device(1)
    assert pyew.Device() == pyew.Device(0) and hash(pyew.Device(1)) == hash(pyew.Device(1))
    assert repr(pyew.Device(1)) == "<pyew.Device 1>" and pyew.Device(1).can_access_peer(0)
    with pytest.raises(ValueError, match=r"no CUDA device 2: this process sees 2 GPU\(s\), 0..1"):
        pyew.Device(2)
    with pytest.raises(TypeError, match="int ordinal or a pyew.Device"):
        pyew.Device("cuda:1")


def test_device_context_is_current_and_restored(two):
    _, api, _ = two
    with pyew.Device(1):
        assert pyew.Device().id == 1 and api.current() == 1
        x = pyew.zeros(4)
        with pyew.Device(0):
            assert pyew.empty(3).device == pyew.Device(0)
        assert api.current() == 1
    assert api.current() == 0 and pyew.Device().id == 0
    assert x.device == pyew.Device(1) and x.__dlpack_device__() == (dlpack.KDL_CUDA, 1)
    assert pyew.empty(2, device=1).device.id == 1


def test_device_context_is_per_thread(two):
    _, api, _ = two
    seen = []
    with pyew.Device(1):
        t = threading.Thread(target=lambda: seen.append(pyew.Device().id))
        t.start()
        t.join()
        seen.append(pyew.Device().id)
    assert seen == [0, 1]


@needs_lib
def test_a_call_runs_on_its_operands_device_and_restores_the_callers(two, rng):
    _, api, launches = two
    a = rng.standard_normal(1000).astype(np.float32)
    b = rng.standard_normal(1000).astype(np.float32)
    x, y = on_gpu(a, 1), on_gpu(b, 1)
    assert api.current() == 0
    z = pyew.add(x, y)
    assert z.device.id == 1 and api.current() == 0
    assert launches[-1][1:] == (1, 1)          # launched with GPU 1 current, on a stream of GPU 1
    np.testing.assert_array_equal(z.get(), a + b)
    w = pyew.mul(x, np.float32(2))              # the general path (a scalar operand)
    assert w.device.id == 1 and launches[-1][1:] == (1, 1)
    np.testing.assert_array_equal(w.get(), a * 2)
    v = pyew.add(x, b)                          # a numpy operand goes to the device array's GPU
    assert v.device.id == 1
    np.testing.assert_array_equal(v.get(), a + b)


@needs_lib
def test_numpy_calls_run_on_the_current_device(two, rng):
    _, api, launches = two
    a = rng.standard_normal(3000).astype(np.float32)
    with pyew.Device(1):
        r = pyew.sigmoid(a)
    assert isinstance(r, np.ndarray) and api.current() == 0
    assert {ln[1:] for ln in launches} == {(1, 1)}
    np.testing.assert_allclose(r, 1 / (1 + np.exp(-a.astype(np.float64))), rtol=1e-6)
    launches.clear()
    pyew.sigmoid(a)
    assert {ln[1:] for ln in launches} == {(0, 0)}


@needs_lib
def test_streamed_numpy_calls_use_lanes_of_their_device(two, rng, transfer_limits):
    _, api, launches = two
    pyew.set_transfer_limits(small_bytes=0, pinned_bytes=1 << 20, threads=3)
    a = rng.standard_normal(200_000).astype(np.float32)
    with pyew.Device(1):
        r = pyew.add(a, a)
    np.testing.assert_array_equal(r, a + a)
    assert len(launches) > 3 and {ln[1:] for ln in launches} == {(1, 1)}   # workers bound to GPU 1
    assert api.current() == 0


@needs_lib
def test_mixed_devices_are_refused_before_anything_runs(two, rng):
    cuda, _, launches = two
    x, y = on_gpu(np.ones(8, np.float32), 0), on_gpu(np.ones(8, np.float32), 1)
    pyew.add(x, x), pyew.add(y, y), pyew.add(x, 1.0)     # plans of these kinds of call exist
    launches.clear()
    held = cuda.device_bytes()
    for call in (lambda: pyew.add(x, y), lambda: pyew.add(y, x), lambda: pyew.add(x, 1.0, out=pyew.empty(8, device=1)),
                 lambda: pyew.mul(y, np.ones(8, np.float32), out=x)):
        with pytest.raises(ValueError, match=r"is on cuda:\d, but this call runs on cuda:\d .*must be on one GPU"):
            call()
    with pytest.raises(ValueError, match="'x' is on cuda:1, but this call runs on cuda:0"):
        pyew.add(y, y, stream=rt.default_stream(0))         # stream= decides the device
    with pytest.raises(ValueError, match="stream .* is on device 0, but this call runs on device 1"):
        y.get(stream=rt.default_stream(0))
    assert not launches and cuda.device_bytes() <= held + 8 * 4


@needs_lib
def test_to_device_copies_between_gpus(two, rng):
    _, api, _ = two
    a = rng.standard_normal((3, 5)).astype(np.float32)
    x = on_gpu(a, 0)
    assert x.to_device(0) is x
    y = x.to_device(pyew.Device(1))
    assert y.device.id == 1 and y.shape == (3, 5) and api.current() == 0
    np.testing.assert_array_equal(device_view(y.ptr, np.float32, (3, 5)), a)
    np.testing.assert_array_equal(pyew.asarray(x, device=1).get(), a)
    with pytest.raises(ValueError, match="no CUDA device 5"):
        x.to_device(5)


@needs_lib
def test_dlpack_export_names_its_device(two):
    y = on_gpu(np.ones(4, np.float32), 1)
    with pytest.raises(BufferError, match=r"is on \(kDLCUDA, 1\).*not to \(2, 0\)"):
        y.__dlpack__(dl_device=(dlpack.KDL_CUDA, 0))


@needs_lib
def test_foreign_arrays_report_their_device(two):
    cuda, _, launches = two
    y = on_gpu(np.arange(6, dtype=np.float32), 1)

    class CAI:                                  # a foreign array over GPU 1's memory
        __cuda_array_interface__ = {"shape": (6,), "typestr": "<f4", "data": (y.ptr, False), "version": 3,
                                    "strides": None, "stream": 1}

    z = pyew.add(CAI(), 1.0)
    assert z.device.id == 1 and launches[-1][1:] == (1, 1)
    np.testing.assert_array_equal(z.get(), np.arange(6) + 1)
    assert pyew.asarray(CAI()).device.id == 1


def test_external_stream_arguments(two):
    s = pyew.ExternalStream(0x1234, device=1)
    assert s.device.id == 1 and s.handle == 0x1234 and "0x1234 on device 1" in repr(s)
    for bad in ("0x1234", -1, 1.5):
        with pytest.raises(TypeError, match=r"ExternalStream takes a stream \(torch.cuda.Stream, a CuPy stream\) or"):
            pyew.ExternalStream(bad)

    class CupyLike:                        # a library's stream object: kept, and its GPU taken from it
        ptr, device_id = 0x99, 1

    c = CupyLike()
    e = pyew.ExternalStream(c)
    assert e.owner is c and e.handle == 0x99 and e.device.id == 1
    with pytest.raises(TypeError, match="stream must be a pyew.Stream, a pyew.ExternalStream or None"):
        pyew.empty(3).get(stream=0x1234)


@needs_lib
def test_the_readme_example_of_two_gpus(two):
    """The README's example of several GPUs, on the simulated machine of two."""
    import re

    from .helpers import ROOT
    block = next(b for b in re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
                 if "device=1" in b)
    scope: dict = {}
    exec(compile(block, "README.md", "exec"), scope)
    assert scope["y"].device.id == 1 and scope["z"].device.id == 0
    np.testing.assert_array_equal(scope["z"].get(), pyew.gelu(np.ones(1 << 20, np.float32)))
    assert isinstance(scope["r"], np.ndarray) and pyew.Device().id == 0


@needs_lib
def test_one_pinned_ring_for_all_gpus(two, rng, transfer_limits):
    pyew.set_transfer_limits(small_bytes=0, pinned_bytes=1 << 20, threads=3)
    a = rng.standard_normal(300_000).astype(np.float32)
    for d in (0, 1):
        with pyew.Device(d):
            np.testing.assert_array_equal(pyew.add(a, a), a + a)
    assert 0 < transfer.pinned_bytes_held() <= 1 << 20


@needs_lib
def test_out_pairs_and_host_pointers(two, rng):
    a = rng.standard_normal(64).astype(np.float32)
    y, m = pyew.empty(64, device=1), pyew.empty(2, "uint32", device=1)
    got = pyew.relu_mask(a, out=(y, m))                     # numpy in, out= on GPU 1: runs there
    assert got[0] is y and y.device.id == 1
    np.testing.assert_array_equal(y.get(), np.maximum(a, 0))

    class HostCAI:
        __cuda_array_interface__ = {"shape": (64,), "typestr": "<f4", "data": (a.ctypes.data, False),
                                    "version": 3, "strides": None, "stream": 1}

    with pytest.raises(ValueError, match="points to host memory"):
        pyew.relu(HostCAI())


@needs_lib
def test_a_read_only_gpu_array_is_refused_as_out(two, rng):
    """A read-only import (its producer said so) as out= of DeviceArrays on GPU 1: refused with the
    general path's error, nothing written, also where a plan of the call's kind exists."""
    a = rng.standard_normal(64).astype(np.float32)
    x = on_gpu(a, 1)
    keep = on_gpu(np.full(64, 7, np.float32), 1)

    class ReadOnly:
        __cuda_array_interface__ = {"shape": (64,), "typestr": "<f4", "data": (keep.ptr, True),
                                    "version": 3, "strides": None, "stream": 1}

    ro = pyew.interop.import_device(ReadOnly(), rt.default_stream(1))
    assert ro.readonly and ro.device.id == 1
    with pytest.raises(ValueError, match="read-only GPU array"):
        pyew.add(x, x, out=ro)
    np.testing.assert_array_equal(keep.get(), np.full(64, 7, np.float32))


@needs_lib
def test_to_device_orders_the_source_after_the_copy(two, monkeypatch):
    waits = []
    monkeypatch.setattr(rt, "stream_wait", lambda w, o: waits.append((w.ordinal, o.ordinal)))
    x = on_gpu(np.ones(8, np.float32), 0)
    x.to_device(1)
    assert waits == [(1, 0), (0, 1)]        # the copy after x's work; x's next work after the copy


def test_a_too_old_driver_is_named_and_no_driver_is_not_called_old():
    """cudaErrorInsufficientDriver comes both from a driver older than cuda-python's CUDA and from
    a machine without a driver: only the first gets the advice to update it."""
    from pyew import devices

    class Rt:
        def __init__(self, driver):
            self.driver = driver

        def cudaDriverGetVersion(self):
            return 0, self.driver

        def cudaRuntimeGetVersion(self):
            return 0, 13000
    old = devices._driver_hint(Rt(12040))
    assert "driver runs CUDA 12.4, older than the CUDA 13.0" in old and "'cuda-python>=12.6.1,<13'" in old
    assert devices._driver_hint(Rt(0)) == "" and devices._driver_hint(Rt(13000)) == ""
