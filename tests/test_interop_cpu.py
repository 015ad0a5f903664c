"""Foreign arrays without a GPU: the CUDA Array Interface and DLPack import paths, with the
runtime's CUDA calls faked (tests/fake_cuda.py) and objects that look like other libraries'."""
from __future__ import annotations

import gc
import time

import numpy as np
import pytest

from pyew import dlpack, interop
from pyew import dtypes as dt
from pyew import runtime as rt

from .fake_cuda import install


class _S:
    cu = 0
    handle = 0
    ordinal = 0


class FakeCAI:
    def __init__(self, ptr, shape, typestr, strides=None, stream=None, read_only=False, version=3, mask=None):
        self.cai = {"shape": shape, "typestr": typestr, "data": (ptr, read_only),
                    "strides": strides, "version": version, "mask": mask}
        if stream is not None:
            self.cai["stream"] = stream

    @property
    def __cuda_array_interface__(self):
        return self.cai


class FakeTensor:
    """Has DLPack like torch: the capsule is pyew's own exporter over some memory."""
    __module__ = "torch"

    def __init__(self, ptr, shape, info, versioned=True):
        self.ptr, self.shape, self.info, self.versioned = ptr, shape, info, versioned
        self.streams = []

    def __dlpack_device__(self):
        return (dlpack.KDL_CUDA, 0)

    def __dlpack__(self, *, stream=None, max_version=None):
        self.streams.append(stream)
        return dlpack.export(self.ptr, self.shape, self.info, 0, self,
                             versioned=self.versioned and max_version is not None)


@pytest.fixture
def fake(monkeypatch):
    return install(monkeypatch)


def test_cai_import(fake):
    buf = np.arange(12, dtype=np.float32)
    obj = FakeCAI(buf.ctypes.data, (3, 4), "<f4", stream=1)
    d = interop.import_device(obj, _S(), "op", "x")
    assert d.ptr == buf.ctypes.data and d.shape == (3, 4) and d.dtype == np.float32
    assert d.owner is obj


def test_an_import_remembers_the_stream_that_waited_for_its_producer(fakes, monkeypatch):
    """Under a pyew.Stream the import orders that stream after the producer's; a later consumer
    (get(), DLPack, the CUDA Array Interface) must then wait for that stream, not the default one."""
    import pyew
    waits = []
    real = rt.stream_wait
    monkeypatch.setattr(rt, "stream_wait", lambda w, o: waits.append((w.handle, o.handle)) or real(w, o))
    buf = np.arange(8, dtype=np.float32)
    with pyew.Stream() as s:
        d = pyew.asarray(FakeCAI(buf.ctypes.data, (8,), "<f4", stream=0x777))
    assert waits == [(s.handle, 0x777)]
    assert d.__cuda_array_interface__["stream"] == s.handle
    waits.clear()
    np.testing.assert_array_equal(d.get(), buf)
    assert waits == [(0, s.handle)]                 # get() on the default stream waits for s


def test_cai_refusals(fake):
    buf = np.zeros(16, np.float32)
    with pytest.raises(ValueError, match="non-contiguous FakeCAI"):
        interop.import_device(FakeCAI(buf.ctypes.data, (4, 2), "<f4", strides=(16, 8), stream=1), _S(), "op", "x")
    with pytest.raises(TypeError, match="bfloat16 cannot travel"):
        interop.import_device(FakeCAI(buf.ctypes.data, (4,), "<V2", stream=1), _S(), "op", "x")
    with pytest.raises(TypeError, match="complex64"):
        interop.import_device(FakeCAI(buf.ctypes.data, (4,), "<c8", stream=1), _S(), "op", "x")
    with pytest.raises(TypeError, match="masked"):
        interop.import_device(FakeCAI(buf.ctypes.data, (4,), "<f4", stream=1, mask=object()), _S(), "op", "x")
    with pytest.raises(ValueError, match="stream 0"):
        interop.import_device(FakeCAI(buf.ctypes.data, (4,), "<f4", stream=0), _S(), "op", "x")
    # between two elements (a byte view reinterpreted): the kernels would fault on the GPU
    with pytest.raises(ValueError, match="not a multiple of its float32 elements' 4 bytes"):
        interop.import_device(FakeCAI(buf.ctypes.data + 1, (4,), "<f4", stream=1), _S(), "op", "x")
    with pytest.raises(ValueError, match="not a multiple of its int64 elements' 8 bytes"):
        interop.import_device(FakeTensor(buf.ctypes.data + 4, (2,), dt.BY_NAME["int64"]), _S(), "op", "x")


def test_cai_strides_of_a_contiguous_array_are_fine(fake):
    buf = np.zeros(8, np.float64)
    d = interop.import_device(FakeCAI(buf.ctypes.data, (2, 4), "<f8", strides=(32, 8), stream=1), _S(), "op", "x")
    assert d.shape == (2, 4)


def test_dlpack_import_passes_our_stream_and_owns_the_tensor(fake):
    buf = np.arange(6, dtype=np.float16)
    t = FakeTensor(buf.ctypes.data, (2, 3), dt.BY_NAME["bfloat16"])
    d = interop.import_device(t, _S(), "op", "x")
    assert t.streams == [1], "the legacy default stream is passed as 1"
    assert d.ptr == buf.ctypes.data and d.shape == (2, 3) and d.info is dt.BY_NAME["bfloat16"]
    assert dlpack.live_exports() == 1
    del d
    gc.collect()
    assert dlpack.live_exports() == 0, "dropping the DeviceArray runs the producer's deleter"


def test_dlpack_legacy_capsule(fake):
    buf = np.arange(4, dtype=np.int64)
    t = FakeTensor(buf.ctypes.data, (4,), dt.BY_NAME["int64"], versioned=False)
    d = interop.import_device(t, _S(), "op", "x")
    assert d.dtype == np.int64 and d.shape == (4,)


def test_host_objects_are_not_imported(fake):
    assert interop.import_device([1, 2, 3], _S(), "op", "x") is None
    assert interop.import_device(np.ones(3), _S(), "op", "x") is None


def test_capsule_consumed_twice_is_refused():
    a = np.arange(3.0)
    cap = a.__dlpack__()
    dlpack.consume(cap)
    with pytest.raises(BufferError, match="already consumed"):
        dlpack.consume(cap)


def test_bool_through_the_cuda_array_interface_and_dlpack(fake):
    """numpy's bool_ travels as '|b1' (CAI) and as kDLBool, 8 bits (DLPack), both ways."""
    buf = np.array([True, False, True, True], dtype=bool)
    d = interop.import_device(FakeCAI(buf.ctypes.data, (4,), "|b1", stream=1), _S(), "op", "x")
    assert d.dtype == np.bool_ and d.info is dt.BY_NAME["bool"] and d.shape == (4,)
    assert dlpack.dtype_code(dt.BY_NAME["bool"]) == (dlpack.KDL_BOOL, 8) == (6, 8)
    assert dlpack.dtype_of(6, 8, 1) is dt.BY_NAME["bool"]
    assert dlpack.dtype_of(dlpack.KDL_UINT, 8, 1) is dt.BY_NAME["uint8"]      # uint8 is not bool
    t = FakeTensor(buf.ctypes.data, (2, 2), dt.BY_NAME["bool"])
    d = interop.import_device(t, _S(), "op", "x")
    assert d.info is dt.BY_NAME["bool"] and d.shape == (2, 2)
    assert d.__cuda_array_interface__["typestr"] == "|b1"


def _recorded(monkeypatch):
    waits = []
    real = rt.stream_wait
    monkeypatch.setattr(rt, "stream_wait", lambda w, o: waits.append((w.handle, o.handle)) or real(w, o))
    return waits


def test_the_producers_stream_waits_for_a_call_on_its_arrays(fakes, monkeypatch):
    """A call on another library's arrays waits for the producer's stream, and when it returns the
    producer's stream waits for the call's: the owner's later work (a write, its allocator reusing
    a temporary) follows pyew's kernel. out= returns the caller's own object, as numpy's does."""
    import pyew
    waits = _recorded(monkeypatch)
    x, o = np.arange(8, dtype=np.float32), np.full(8, np.nan, np.float32)
    xs, os_ = (FakeCAI(a.ctypes.data, (8,), "<f4", stream=0x777) for a in (x, o))
    assert pyew.add(xs, xs, out=os_) is os_
    np.testing.assert_array_equal(o, x + x)
    assert waits.count((0, 0x777)) == 3              # each import (two inputs, out) waits for the producer
    assert waits.count((0x777, 0)) == 3 and waits.index((0x777, 0)) > waits.index((0, 0x777))
    waits.clear()
    with pyew.Stream() as s:
        pyew.relu(FakeCAI(x.ctypes.data, (8,), "<f4", stream=1))
    assert waits == [(s.handle, 1), (1, s.handle)]


def test_a_kept_view_of_a_foreign_array_does_not_signal_its_producer(fakes, monkeypatch):
    """pyew.asarray(obj) is the caller's view: the producer's stream may not outlive it."""
    import pyew
    waits = _recorded(monkeypatch)
    x = np.arange(8, dtype=np.float32)
    d = pyew.asarray(FakeCAI(x.ctypes.data, (8,), "<f4", stream=0x777))
    np.testing.assert_array_equal(pyew.relu(d).get(), x)
    del d
    gc.collect()
    assert all(w != 0x777 for w, _ in waits)


def test_exports_wait_for_every_use_queued_so_far(fakes, monkeypatch):
    """A consumer may write: DLPack's consumer stream waits for the last write and for reads on
    other streams; the CUDA Array Interface's one stream is made to cover them."""
    import pyew
    d = pyew.asarray(np.arange(8, dtype=np.float32))
    with pyew.Stream() as s:
        pyew.relu(d)                          # a read of d on s
    waits = _recorded(monkeypatch)
    d.__dlpack__(stream=5)
    assert sorted(waits) == sorted([(5, 0), (5, s.handle)])
    waits.clear()
    assert d.__cuda_array_interface__["stream"] == 1
    assert waits == [(0, s.handle)]


def test_an_out_of_another_library_and_dtype_is_cast_into(fakes):
    """out= of another library is checked and written through its imported view: its dtype and
    shape are read there (a torch dtype is not numpy's), and a refused cast writes nothing."""
    import pyew
    x = np.arange(8, dtype=np.float32)
    o64, o32i = np.full(8, np.nan), np.full(8, -1, np.int32)
    xs = FakeCAI(x.ctypes.data, (8,), "<f4", stream=1)
    out = FakeCAI(o64.ctypes.data, (8,), "<f8", stream=1)
    assert pyew.add(xs, xs, out=out) is out
    np.testing.assert_array_equal(o64, x + x)
    with pytest.raises(TypeError, match="Cannot cast ufunc 'add' output from dtype\\('float32'\\) to "
                                        "dtype\\('int32'\\)"):
        pyew.add(xs, xs, out=FakeCAI(o32i.ctypes.data, (8,), "<i4", stream=1))
    assert (o32i == -1).all()
    with pytest.raises(ValueError, match="non-broadcastable output operand with shape \\(4,\\)"):
        pyew.add(xs, xs, out=FakeCAI(o32i.ctypes.data, (4,), "<f4", stream=1))
    d = pyew.empty((), "float32")
    assert np.add(1.0, 2.0, out=d) is d and float(d) == 3.0         # numbers alone into a 0-d GPU out


def test_device_arrays_have_a_dask_token_without_a_copy(fakes, monkeypatch):
    import pyew
    da = pytest.importorskip("dask.base")
    d = pyew.asarray(np.arange(4, dtype=np.float32))
    monkeypatch.setattr(pyew.DeviceArray, "get", lambda *a, **k: pytest.fail("tokenize copied to the host"))
    assert da.tokenize(d) != da.tokenize(d)       # values that change in place, in reused memory: never reused


def test_cupys_reader_for_the_c_replay(fake):
    """What a plan's C replay asks of a CuPy array: its address, dtype row and shape where the
    Python reader would take it without a wait; None (the Python reader then runs) for a dtype not
    met yet, a non-contiguous array, another GPU, or CuPy's current stream not the call's."""
    import types

    current = types.SimpleNamespace(ptr=0)
    mod = types.SimpleNamespace(cuda=types.SimpleNamespace(get_current_stream=lambda *a: current))
    read, replayed = interop._cupy_reader(mod)

    def array(contiguous=True, device=0, dtype=np.float32):
        return types.SimpleNamespace(dtype=np.dtype(dtype), flags=types.SimpleNamespace(c_contiguous=contiguous),
                                     device=types.SimpleNamespace(id=device), shape=(3, 4), strides=(16, 4),
                                     data=types.SimpleNamespace(ptr=0xA000, device_id=device))
    s = rt.DEFAULT_STREAM
    assert replayed(array(), s) is None                      # float32 not met yet
    assert read(array(), s, "add", "x").ptr == 0xA000         # the Python reader meets it
    assert replayed(array(), s) == (0xA000, dt.BY_NAME["float32"], (3, 4))
    assert replayed(array(contiguous=False), s) is None
    assert replayed(array(device=1), s) is None
    assert replayed(array(dtype=np.float64), s) is None
    current.ptr = 0x77                                       # CuPy's own stream: the call must wait for it
    assert replayed(array(), s) is None


def test_exports_of_an_empty_view_and_of_an_unsynchronized_copy(fakes, monkeypatch):
    """The CUDA Array Interface gives a zero-size array the null pointer (its spec's rule); a DLPack
    copy asked for with stream=-1 (the consumer synchronizes itself) is finished when handed over,
    since the consumer cannot wait for a copy queued on pyew's stream."""
    import pyew
    d = pyew.asarray(np.arange(8, dtype=np.float32))
    assert d[3:3].__cuda_array_interface__["data"][0] == 0 and d[3:].__cuda_array_interface__["data"][0] == d.ptr + 12
    waited = []
    real = rt.stream_synchronize
    monkeypatch.setattr(rt, "stream_synchronize", lambda s: waited.append(s) or real(s))
    cap = d.__dlpack__(stream=-1, max_version=(1, 0), copy=True)
    assert len(waited) == 1
    imp = dlpack.consume(cap)
    assert imp.ptr != d.ptr and imp.shape == (8,)
    waited.clear()
    d.__dlpack__(stream=-1, max_version=(1, 0))          # no copy: nothing to wait for
    assert waited == []


def test_a_dlpack_import_without_a_producer_stream_is_released_after_pyews_work(fakes, monkeypatch):
    """A DLPack producer that names no stream (JAX's) gets its capsule back only once the work pyew
    queued on the memory is done: its allocator may reuse the memory on a stream of its own."""
    from pyew import array
    finished = [False]

    class Event:
        def record(self, stream_cu):
            pass

        def done(self):
            return finished[0]
    monkeypatch.setattr(rt, "Event", Event)
    buf = np.arange(6, dtype=np.float32)

    class JaxLike(FakeTensor):
        __module__ = "jaxlib"
    t = JaxLike(buf.ctypes.data, (6,), dt.BY_NAME["float32"])
    before = dlpack.live_exports()
    d = interop.import_device(t, rt.resolve_stream(None), "op", "x")
    assert dlpack.live_exports() == before + 1
    del d
    gc.collect()
    assert dlpack.live_exports() == before + 1, "released before pyew's queued work finished"
    finished[0] = True
    for _ in range(200):             # the looking thread releases it without another call of pyew's
        if dlpack.live_exports() == before:
            break
        time.sleep(0.01)
    assert dlpack.live_exports() == before
    array.release_finished()
