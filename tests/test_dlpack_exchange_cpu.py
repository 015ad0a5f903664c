"""DLPack's C exchange API without a GPU: pyew's C extension reading a producer's table of C
functions (compiled here, standing in for PyTorch's), and interop's reader over it, with the
runtime's CUDA calls faked."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from pyew import dtypes as dt
from pyew import interop, library

from .fake_cuda import install
from .helpers import shared_library

LIB = library.library_path()
EXT = LIB.parent / library.EXTENSION
pytestmark = pytest.mark.skipif(not EXT.exists(), reason=f"{EXT} not built (make all, with the Python headers)")

# A producer: the next tensor it exports is set by set_next; it counts deleter calls and records
# which device's stream was asked for. Returning -1 without an exception set is a producer bug
# pyew must survive.
PRODUCER = r"""
#include <stdint.h>
#include <stddef.h>
typedef struct { int32_t device_type, device_id; } dev;
typedef struct { uint8_t code, bits; uint16_t lanes; } dty;
typedef struct { void* data; dev device; int32_t ndim; dty dtype; int64_t* shape; int64_t* strides;
                 uint64_t byte_offset; } tensor;
typedef struct managed { uint32_t major, minor; void* ctx; void (*deleter)(struct managed*); uint64_t flags;
                         tensor t; } managed;
typedef struct header { uint32_t major, minor; struct header* prev; } header;
typedef struct { header h; void* alloc; int (*from_py)(void*, managed**); void* to_py; int (*view)(void*, tensor*);
                 int (*stream)(int32_t, int32_t, void**); } api_t;

static tensor next;
static int64_t shape[8], strides[8];
static managed held;
uint64_t flags;
int fail, stream_fail, deleted;
int32_t asked_type = -1, asked_id = -1;
void* current;

void set_next(void* data, int32_t type, int32_t id, int32_t ndim, int32_t code, int32_t bits, int32_t lanes,
              const int64_t* shp, const int64_t* str, uint64_t offset) {
  for (int i = 0; i < ndim; ++i) { shape[i] = shp[i]; if (str) strides[i] = str[i]; }
  tensor t = {data, {type, id}, ndim, {(uint8_t)code, (uint8_t)bits, (uint16_t)lanes}, shape,
              str ? strides : NULL, offset};
  next = t;
}
static int view(void* obj, tensor* out) { (void)obj; if (fail) return -1; *out = next; return 0; }
static void release(managed* m) { (void)m; ++deleted; }
static int from_py(void* obj, managed** out) {
  (void)obj;
  if (fail) return -1;
  held.major = 1; held.minor = 3; held.deleter = release; held.flags = flags; held.t = next;
  *out = &held;
  return 0;
}
static int stream(int32_t type, int32_t id, void** s) {
  if (stream_fail) return -1;
  asked_type = type; asked_id = id; *s = current;
  return 0;
}
api_t api = {{1, 3, NULL}, NULL, from_py, NULL, view, stream};
api_t api_managed_only = {{1, 1, NULL}, NULL, from_py, NULL, NULL, stream};
api_t api_next_major = {{2, 0, NULL}, NULL, from_py, NULL, view, stream};
api_t api_view_only = {{1, 3, NULL}, NULL, NULL, NULL, view, stream};
"""
_NAME = b"dlpack_exchange_api"
_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.restype = ctypes.py_object
_new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
F32 = 2 | 32 << 8 | 1 << 16


class Producer:
    def __init__(self, lib):
        self.lib = lib
        self.lib.set_next.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32,
                                      ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64]

    def capsule(self, table="api", name=_NAME):
        return _new_capsule(ctypes.addressof(ctypes.c_char.in_dll(self.lib, table)), name, None)

    def set(self, data, shape, *, strides=None, device=(2, 0), dtype=(2, 32, 1), offset=0):
        shp = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        st = None if strides is None else (ctypes.c_int64 * len(strides))(*strides)
        self.lib.set_next(data, device[0], device[1], len(shape), *dtype, ctypes.addressof(shp),
                          None if st is None else ctypes.addressof(st), offset)   # set_next copies both

    def var(self, name, ctype=ctypes.c_int):
        return ctype.in_dll(self.lib, name)


@pytest.fixture(scope="module")
def producer(tmp_path_factory):
    return Producer(shared_library(tmp_path_factory, "producer", PRODUCER))


@pytest.fixture
def ext():
    e, note = library.load_extension(EXT.parent)
    if e is None:
        pytest.skip(note)
    return e


@pytest.fixture(autouse=True)
def reset(producer):
    for name in ("fail", "stream_fail", "deleted"):
        producer.var(name).value = 0
    producer.var("flags", ctypes.c_uint64).value = 0
    producer.var("asked_type", ctypes.c_int32).value = -1
    producer.var("current", ctypes.c_void_p).value = None


def test_view_reads_pointer_dtype_shape_and_the_current_stream(producer, ext):
    producer.set(0x10000, (3, 4), offset=64, device=(2, 1))
    producer.var("current", ctypes.c_void_p).value = 0x1234
    assert ext.dlpack_version(producer.capsule()) == (1, 3)
    got = ext.dlpack_view(producer.capsule(), object(), False)
    assert got == (0x10000 + 64, 2, 1, F32, (3, 4), True, 0x1234, False)
    assert producer.var("asked_type", ctypes.c_int32).value == 2 and producer.var("asked_id", ctypes.c_int32).value == 1
    assert producer.var("deleted").value == 0          # the plain tensor has nothing to release


@pytest.mark.parametrize("shape,strides,contiguous", [
    ((3, 4), (4, 1), True),
    ((3, 4), (1, 3), False),          # a transpose
    ((3, 4), (8, 2), False),          # every other element
    ((3, 1, 4), (4, 99, 1), True),    # a size-1 dim's stride does not matter
    ((0, 4), (1, 7), True),           # no elements
    ((), None, True),
])
def test_view_contiguity(producer, ext, shape, strides, contiguous):
    producer.set(0x20000, shape, strides=strides)
    got = ext.dlpack_view(producer.capsule(), object(), False)
    assert got[4] == shape and got[5] is contiguous


def test_view_off_the_gpu_asks_no_stream(producer, ext):
    producer.set(0x30000, (5,), device=(1, 0))
    got = ext.dlpack_view(producer.capsule(), object(), False)
    assert got[1] == 1 and got[6] == 0
    assert producer.var("asked_type", ctypes.c_int32).value == -1


def test_view_as_a_managed_tensor_reads_its_flags_and_releases_it(producer, ext):
    producer.set(0x40000, (2,))
    producer.var("flags", ctypes.c_uint64).value = 1
    assert ext.dlpack_view(producer.capsule(), object(), True)[7] is True
    assert producer.var("deleted").value == 1
    # a table without the plain-tensor function is read the managed way whatever is asked
    assert ext.dlpack_view(producer.capsule("api_managed_only"), object(), False)[7] is True
    assert producer.var("deleted").value == 2


def test_view_errors(producer, ext):
    producer.set(0x50000, (2,))
    producer.var("fail").value = 1
    with pytest.raises(RuntimeError, match="dltensor_from_py_object failed"):
        ext.dlpack_view(producer.capsule(), object(), False)
    with pytest.raises(RuntimeError, match="managed_tensor_from_py_object failed"):
        ext.dlpack_view(producer.capsule(), object(), True)
    producer.var("fail").value = 0
    producer.var("stream_fail").value = 1
    with pytest.raises(RuntimeError, match="current_work_stream failed"):
        ext.dlpack_view(producer.capsule(), object(), False)
    with pytest.raises(ValueError, match="major version 2"):
        ext.dlpack_version(producer.capsule("api_next_major"))
    # dlpack.h requires every function; a table without the managed-tensor one is refused, not called
    with pytest.raises(ValueError, match="without its tensor exports"):
        ext.dlpack_version(producer.capsule("api_view_only"))
    with pytest.raises(ValueError, match="without managed_tensor_from_py_object_no_sync"):
        ext.dlpack_view(producer.capsule("api_view_only"), object(), True)
    with pytest.raises(ValueError, match="without its tensor exports"):
        ext.dlpack_version(producer.capsule("api_managed_only"))
    with pytest.raises(ValueError):
        ext.dlpack_view(producer.capsule(name=b"something_else"), object(), False)
    with pytest.raises(TypeError, match="takes 3 arguments"):
        ext.dlpack_view(producer.capsule(), object())


# ---- interop's reader over the API --------------------------------------------------------------

class _S:
    cu = 0
    handle = 0
    ordinal = 0


def _tensor_type(capsule, module="torch"):
    """A fresh type (interop keeps one reader per type) offering the API, as torch.Tensor does."""
    return type("Tensor", (), {"__module__": module, "__dlpack_c_exchange_api__": capsule, "requires_grad": False})


@pytest.fixture
def fake(monkeypatch):
    f = install(monkeypatch)
    waits = []
    monkeypatch.setattr(interop.rt, "stream_wait", lambda waiter, other: waits.append((waiter, other.handle)))
    monkeypatch.setattr(interop.rt, "foreign_stream", lambda handle, ordinal: type("S", (), {"handle": handle})())
    f.waits = waits
    return f


def test_reader_imports_without_a_copy_and_waits_for_the_producer(producer, ext, fake):
    buf = np.arange(12, dtype=np.float32)
    T = _tensor_type(producer.capsule())
    t = T()
    producer.set(buf.ctypes.data, (3, 4))
    d = interop.import_device(t, _S(), "op", "x")
    assert (d.ptr, d.shape, d.info) == (buf.ctypes.data, (3, 4), dt.BY_NAME["float32"])
    assert d.owner is t and not d.readonly and fake.waits == []
    producer.var("current", ctypes.c_void_p).value = 0x77
    call_stream = _S()
    d = interop.import_device(t, call_stream, "op", "x")
    assert [(w, h) for w, h in fake.waits] == [(call_stream, 0x77)]
    del d           # the import ends: the producer's stream waits for the call's
    assert len(fake.waits) == 2 and fake.waits[1][0].handle == 0x77 and fake.waits[1][1] == call_stream.handle


def test_reader_refusals(producer, ext, fake):
    buf = np.zeros(16, np.float32)
    T = _tensor_type(producer.capsule())
    producer.set(buf.ctypes.data, (4, 2), strides=(1, 4))
    with pytest.raises(ValueError, match=r"non-contiguous Tensor \(shape \(4, 2\)\).*\.contiguous\(\)"):
        interop.import_device(T(), _S(), "op", "x")
    producer.set(buf.ctypes.data, (4,), dtype=(5, 64, 1))
    with pytest.raises(TypeError, match="'x' is a Tensor of dtype DLPack code 5, 64 bits, which pyew does not"):
        interop.import_device(T(), _S(), "op", "x")
    producer.set(buf.ctypes.data, (4,))
    t = T()
    t.requires_grad = True
    with pytest.raises(ValueError, match="requires grad; pass t.detach"):
        interop.import_device(t, _S(), "op", "x")
    producer.set(buf.ctypes.data, (4,), device=(2, 1))
    with pytest.raises(ValueError, match="is on cuda:1, but this call runs on cuda:0"):
        interop.import_device(T(), _S(), "op", "x")
    producer.var("fail").value = 1
    with pytest.raises(TypeError, match="cannot be read through DLPack: DLPack exchange API: dltensor_from"):
        interop.import_device(T(), _S(), "op", "x")
    assert fake.waits == []


def test_reader_checks_grad_of_a_torch_subclass_from_another_module(producer, ext, fake):
    """A parameter class defined in user code inherits torch's API: it is a torch tensor."""
    buf = np.zeros(4, np.float32)
    producer.set(buf.ctypes.data, (4,))
    Param = type("Param", (_tensor_type(producer.capsule()),), {"__module__": "mymodel"})
    p = Param()
    p.requires_grad = True
    with pytest.raises(ValueError, match="requires grad; pass t.detach"):
        interop.import_device(p, _S(), "op", "x")


def test_empty_arrays_of_any_strides_are_contiguous():
    interop._check_contiguous(object(), (2, 0), (1, 1), 4, "op", "x")
    with pytest.raises(ValueError, match="non-contiguous"):
        interop._check_contiguous(object(), (2, 3), (1, 1), 4, "op", "x")


def test_reader_host_tensors_are_host_data(producer, ext, fake):
    buf = np.zeros(4, np.float32)
    producer.set(buf.ctypes.data, (4,), device=(1, 0))
    assert interop.import_device(_tensor_type(producer.capsule())(), _S(), "op", "x") is None


def test_reader_of_another_library_takes_its_read_only_flag(producer, ext, fake):
    buf = np.zeros(4, np.float32)
    producer.set(buf.ctypes.data, (4,))
    producer.var("flags", ctypes.c_uint64).value = 1
    d = interop.import_device(_tensor_type(producer.capsule(), module="somelib")(), _S(), "op", "x")
    assert d.readonly and producer.var("deleted").value == 1


def test_reader_skips_an_api_it_cannot_read(producer, ext, fake):
    """A major version pyew does not know: the type is read through its other protocols."""
    T = _tensor_type(producer.capsule("api_next_major"), module="somelib")
    assert interop._exchange_reader(T) is None
    assert interop.import_device(T(), _S(), "op", "x") is None     # it offers nothing else
