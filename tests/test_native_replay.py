"""A plan replayed in C (pyew/_ewcall.c: native, replayer), without a GPU: a probe entry records
what the replay passes it, a probe DLPack exchange API stands for another library's tensors.
Checked: the key is call.plan_key's (so C and Python find each other's plans), each slot's
source, the stream waits it leaves to read_on, the calls it leaves to Python (None before
anything is allocated or launched; an entry's declining return code, before any launch), and a
failed launch's error."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from pyew import call
from pyew import dtypes as dt
from pyew.array import DeviceArray

from .helpers import shared_library
from .test_ewcall import ROOT, _extension, needs_ext

PROBE = r"""
#include <stdint.h>
#include <string.h>
#include "ew_api.h"
ew_arg seen[12], history[4][12];
int calls;
int rc_next;
int arrays_at = -1;         /* the slot holding the address of the array arguments' addresses */
uint64_t arrays_seen[4];
int probe_packed(const ew_arg* a) {
  memcpy(seen, a, sizeof seen);
  if (arrays_at >= 0) memcpy(arrays_seen, a[arrays_at].p, sizeof arrays_seen);
  memcpy(history[calls % 4], a, sizeof seen);
  ++calls;
  return rc_next;
}

/* DLPack's exchange API (version 1), answering every object with the tensor set below */
typedef struct { int32_t device_type, device_id; } dl_device;
typedef struct { uint8_t code, bits; uint16_t lanes; } dl_dtype;
typedef struct { void* data; dl_device device; int32_t ndim; dl_dtype dtype; int64_t* shape; int64_t* strides;
                 uint64_t byte_offset; } dl_tensor;
typedef struct header { uint32_t major, minor; struct header* prev; } header;
int64_t shape[4], strides[4];
int use_strides, fail_export;
dl_tensor tensor;
void* current;
static int export_(void* obj, dl_tensor* out) {
  (void)obj;
  if (fail_export) return -1;
  *out = tensor;
  out->shape = shape;
  out->strides = use_strides ? strides : 0;
  return 0;
}
typedef struct managed_t {
  uint32_t major, minor;
  void* ctx;
  void (*deleter)(struct managed_t*);
  uint64_t flags;
  dl_tensor tensor;
} managed_t;
managed_t one;
int deleted;
static void release(managed_t* m) { (void)m; ++deleted; }
static int managed(void* obj, managed_t** out) {
  if (export_(obj, &one.tensor) != 0) return -1;
  one.major = 1;
  one.deleter = release;
  *out = &one;
  return 0;
}
static int stream_(int32_t type, int32_t id, void** s) { (void)type; (void)id; *s = current; return 0; }
struct { header h; void* alloc; void* from_py; void* to_py; void* plain; void* stream; } api = {
  {1, 1, 0}, 0, (void*)managed, 0, (void*)export_, (void*)stream_};
"""

F32 = dt.BY_NAME["float32"]


class Probe:
    def __init__(self, lib):
        self.lib = lib
        self.seen = (ctypes.c_uint64 * 12).in_dll(lib, "seen")
        self.history = ((ctypes.c_uint64 * 12) * 4).in_dll(lib, "history")
        self.calls = ctypes.c_int.in_dll(lib, "calls")
        self.rc = ctypes.c_int.in_dll(lib, "rc_next")
        self.arrays_at = ctypes.c_int.in_dll(lib, "arrays_at")
        self.arrays_seen = (ctypes.c_uint64 * 4).in_dll(lib, "arrays_seen")


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    return Probe(shared_library(tmp_path_factory, "replay_probe", PROBE, ROOT / "libew"))


class Stream:
    def __init__(self, handle=7, ordinal=0):
        self.handle, self.ordinal, self.dims = handle, ordinal, (132, 2048)


class Buf:
    """A DeviceArray's buffer as read_on sees it: the stream that last used it."""
    def __init__(self, last):
        self.last, self.reads = last, []

    def read_on(self, stream):
        self.reads.append(stream)


class Tensor:
    """Another library's GPU tensor, read through the probe's exchange API."""
    def __init__(self, requires_grad=False):
        self.requires_grad = requires_grad


class Op:
    pass


class Setup:
    def __init__(self, probe, arity=2, kinds="pppl" + "pii"):
        self.ext = _extension()
        self.probe = probe
        self.entry = self.ext.bind(ctypes.cast(probe.lib.probe_packed, ctypes.c_void_p).value, kinds, "probe")
        self.target, self.plans, self.stream, self.made = Op(), {}, Stream(), []
        self.on = True
        capsule = ctypes.pythonapi.PyCapsule_New
        capsule.restype, capsule.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        self.api = capsule(ctypes.addressof(ctypes.c_char.in_dll(probe.lib, "api")), b"dlpack_exchange_api", None)
        self.exchange, self.codes = {}, {}
        self.launch = self.launches = object()       # where launches go: the replay runs while it is this one
        self.fn = self.ext.replayer(self.target, arity, self.plans, self.stream_of, self.new, DeviceArray,
                                    self.exchange, self.codes, self.check, self, self.launches, call.NUMBERS)

    def stream_of(self):
        return self.stream if self.on else None

    def new(self, shape, info, stream, size):
        assert stream is self.stream
        d = DeviceArray(Buf(stream), 0x5000 + 16 * len(self.made), shape, info, size)
        self.made.append(d)
        return d

    @staticmethod
    def check(rc, where):
        raise RuntimeError(f"{where} failed: {rc}")

    def plan(self, args, slots, shape=(3,), numbers=None, target=None):
        native = self.ext.native(self.entry, (*slots, ("s", 0), ("d", 0), ("d", 1)), shape, F32, 3)
        key = call.plan_key(self.target, args)
        plan = call.Plan(target or self.target, shape, F32, [], [], numbers, None, native=native)
        self.plans[key] = plan
        return plan

    def seen(self, count):
        return list(self.probe.seen[:count])


def array(last, ptr, shape=(3,)):
    return DeviceArray(Buf(last), ptr, shape, F32)


@needs_ext
def test_each_slot_from_its_source_and_the_key_is_plan_keys(probe):
    s = Setup(probe)
    x, y = array(s.stream, 0x1000), array(s.stream, 0x2000)
    s.plan([x, y], [("o", 0), ("a", 0), ("a", 1), ("c", 3)])
    before = probe.calls.value
    res = s.fn((x, y))
    assert res is s.made[0] and res.shape == (3,) and res.info is F32
    assert probe.calls.value == before + 1
    assert s.seen(7) == [0x5000, 0x1000, 0x2000, 3, 7, 132, 2048]
    assert x.buffer.reads == [] and y.buffer.reads == []          # last used on the call's stream: no wait


@needs_ext
def test_an_array_last_used_on_another_stream_is_read_on_this_one(probe):
    s = Setup(probe)
    other = Stream(handle=9)
    x, y = array(other, 0x1000), array(s.stream, 0x2000)
    s.plan([x, y], [("o", 0), ("a", 1), ("a", 0), ("c", 3)])
    s.fn((x, y))
    assert x.buffer.reads == [s.stream] and y.buffer.reads == []
    assert s.seen(3) == [0x5000, 0x2000, 0x1000]


@needs_ext
@pytest.mark.parametrize("number, other", [(0.5, 2), (np.float32(0.5), 0.5), (np.int32(3), np.int64(3))])
def test_numbers_come_from_the_plan(probe, number, other):
    """A Python number or a numpy scalar is read as a number, its type in the key; another type
    has a key of its own, and a 0-d array is no number here."""
    s = Setup(probe, kinds="pppl" + "p" + "pii")
    x = array(s.stream, 0x1000)
    given = []

    def numbers(args, stream):
        given.append((args, stream))
        return (0xC0DE,)
    s.plan([x, number], [("o", 0), ("a", 0), ("n", 0), ("c", 3), ("c", 0xAB)], numbers=numbers)
    s.fn((x, number))
    assert given == [((x, number), s.stream)]
    assert s.seen(8) == [0x5000, 0x1000, 0xC0DE, 3, 0xAB, 7, 132, 2048]
    assert s.fn((x, other)) is None             # another type is another key: no plan made for it
    assert s.fn((x, np.array(number))) is None and len(given) == 1
    # numbers of types the replayer is not given are left to Python, though a plan has their key
    s.fn = s.ext.replayer(s.target, 2, s.plans, s.stream_of, s.new, DeviceArray, {}, {}, s.check, s, s.launches,
                          frozenset())
    assert (s.fn((x, number)) is None) == (type(number) not in (float, int, bool)) and len(given) == 1 + (
        type(number) in (float, int, bool))


@needs_ext
def test_calls_left_to_python_allocate_and_launch_nothing(probe):
    s = Setup(probe)
    x, y = array(s.stream, 0x1000), array(s.stream, 0x2000)
    plan = s.plan([x, y], [("o", 0), ("a", 0), ("a", 1), ("c", 3)])
    before = probe.calls.value
    assert s.fn((x,)) is None                                       # another arity
    assert s.fn((x, [1.0, 2.0, 3.0])) is None                       # host data
    assert s.fn((x, array(s.stream, 0x3000, (4,)))) is None         # another shape: no plan
    s.on = False
    assert s.fn((x, y)) is None                                     # no stream: several GPUs
    s.on = True
    s.launch = lambda *a: None
    assert s.fn((x, y)) is None                                     # launches go to a stand-in
    s.launch = s.launches
    plan.native = None
    assert s.fn((x, y)) is None                                     # a plan without a native form
    s.plan([x, y], [("o", 0), ("a", 0), ("a", 1), ("c", 3)], target=Op())
    assert s.fn((x, y)) is None                                     # another op's plan
    s.plan([x, 0.5], [("o", 0), ("a", 0), ("n", 0), ("c", 3)], numbers=lambda a, st: None)
    assert s.fn((x, 0.5)) is None                                   # a number its dtype cannot hold
    assert probe.calls.value == before and s.made == []


@needs_ext
def test_a_split_launch_where_the_packs_are_aligned(probe):
    """A call split into whole 16-byte packs and the rest: both parts, each address moved by its
    offset, where the addresses the packs read are aligned; else the whole call in one launch."""
    s = Setup(probe, kinds="pppl" + "p" + "pii")
    x = array(s.stream, 0x1000, (11,))
    whole = [("o", 0), ("a", 0), ("n", 0), ("c", 11), ("c", 0xAAA)]
    parts = [[("o", 0, 0), ("a", 0, 0), ("n", 0, 0), ("c", 8), ("c", 0xBBB)],
             [("o", 0, 32), ("a", 0, 32), ("n", 0, 0), ("c", 3), ("c", 0xCCC)]]
    native = s.ext.native(s.entry, [(*w, ("s", 0), ("d", 0), ("d", 1)) for w in [whole]][0], (11,), F32, 11,
                          [(*p, ("s", 0), ("d", 0), ("d", 1)) for p in parts], [0, 1])
    s.plans[call.plan_key(s.target, [x, 0.5])] = call.Plan(s.target, (11,), F32, [0], [1], lambda a, st: (0x700,),
                                                           None, native=native)

    def launches(count):
        return [list(probe.history[(probe.calls.value - count + k) % 4][:5]) for k in range(count)]
    before = probe.calls.value
    res = s.fn((x, 0.5))
    assert probe.calls.value == before + 2
    assert launches(2) == [[res.ptr, 0x1000, 0x700, 8, 0xBBB], [res.ptr + 32, 0x1020, 0x700, 3, 0xCCC]]
    y = array(s.stream, 0x1004, (11,))                   # the input off 16 bytes: one launch
    res = s.fn((y, 0.5))
    assert probe.calls.value == before + 3
    assert launches(1) == [[res.ptr, 0x1004, 0x700, 11, 0xAAA]]
    with pytest.raises(ValueError, match="aligned slot 3 is not an address"):
        s.ext.native(s.entry, (*whole, ("s", 0), ("d", 0), ("d", 1)), (11,), F32, 11, [], [3])
    with pytest.raises(ValueError, match="at most 2 parts"):
        s.ext.native(s.entry, (*whole, ("s", 0), ("d", 0), ("d", 1)), (11,), F32, 11, [whole] * 3, [])


@needs_ext
def test_the_array_arguments_as_one_array_and_a_declining_return_code(probe):
    """A formula's entry (ew_jit_map) takes its arrays' addresses as one array, the numbers
    skipped; its return code for a kernel still to compile leaves the call to Python (None, no
    error) where a native form names it as declining."""
    s = Setup(probe, arity=3)
    context = (("s", 0), ("d", 0), ("d", 1))
    x, y = array(s.stream, 0x1000), array(s.stream, 0x2000)
    native = s.ext.native(s.entry, (("o", 0), ("A", 0), ("n", 0), ("c", 3), *context), (3,), F32, 3, (), (), -1)
    s.plans[call.plan_key(s.target, [x, 0.5, y])] = call.Plan(s.target, (3,), F32, [0, 2], [1],
                                                              lambda a, st: (0xC0DE,), None, native=native)
    probe.arrays_at.value = 1
    try:
        res = s.fn((x, 0.5, y))
        assert list(probe.arrays_seen[:2]) == [0x1000, 0x2000]
        assert s.seen(7)[:1] + s.seen(7)[2:] == [res.ptr, 0xC0DE, 3, 7, 132, 2048]
        probe.rc.value = -1
        before = probe.calls.value
        assert s.fn((x, 0.5, y)) is None            # declined: nothing raised, Python runs the call
        assert probe.calls.value == before + 1
    finally:
        probe.rc.value = 0
        probe.arrays_at.value = -1
    plain = s.ext.native(s.entry, (("o", 0), ("A", 0), ("n", 0), ("c", 3), *context), (3,), F32, 3)
    s.plans[call.plan_key(s.target, [x, 0.5, y])].native = plain
    probe.rc.value = -1
    try:
        with pytest.raises(RuntimeError, match="probe failed: -1"):   # declining only where the form says so
            s.fn((x, 0.5, y))
    finally:
        probe.rc.value = 0
    with pytest.raises(ValueError, match="declines=0 is not a failure code"):
        s.ext.native(s.entry, (("o", 0), ("A", 0), ("n", 0), ("c", 3), *context), (3,), F32, 3, (), (), 0)
    with pytest.raises(ValueError, match="does not fit"):
        s.ext.native(s.entry, (("o", 0), ("A", 1), ("n", 0), ("c", 3), *context), (3,), F32, 3)
    with pytest.raises(ValueError, match="does not fit"):        # the arrays' addresses where an int goes
        s.ext.native(s.entry, (("o", 0), ("a", 0), ("n", 0), ("A", 0), *context), (3,), F32, 3)


@needs_ext
def test_a_failed_launch_raises_through_check(probe):
    s = Setup(probe)
    x, y = array(s.stream, 0x1000), array(s.stream, 0x2000)
    s.plan([x, y], [("o", 0), ("a", 0), ("a", 1), ("c", 3)])
    probe.rc.value = 700
    try:
        with pytest.raises(RuntimeError, match="probe failed: 700"):
            s.fn((x, y))
    finally:
        probe.rc.value = 0


@needs_ext
def test_an_allocation_that_fails_launches_nothing(probe):
    s = Setup(probe)
    x, y = array(s.stream, 0x1000), array(s.stream, 0x2000)
    s.plan([x, y], [("o", 0), ("a", 0), ("a", 1), ("c", 3)])

    def oom(*a):
        raise MemoryError("out of GPU memory")
    s.new = oom
    s.fn = s.ext.replayer(s.target, 2, s.plans, s.stream_of, oom, DeviceArray, {}, {}, s.check, s, s.launches,
                          call.NUMBERS)
    before = probe.calls.value
    with pytest.raises(MemoryError):
        s.fn((x, y))
    assert probe.calls.value == before


def _set_tensor(probe, ptr=0xF000, device=(2, 0), shape=(3,), strides=None, code=(2, 32, 1), stream=7, offset=0):
    lib = probe.lib
    t = (ctypes.c_uint64 * 6).in_dll(lib, "tensor")     # data, device, ndim|dtype, shape, strides, offset
    ctypes.memset(ctypes.addressof(t), 0, ctypes.sizeof(t))
    t[0] = ptr
    ctypes.c_int32.from_address(ctypes.addressof(t) + 8).value = device[0]
    ctypes.c_int32.from_address(ctypes.addressof(t) + 12).value = device[1]
    ctypes.c_int32.from_address(ctypes.addressof(t) + 16).value = len(shape)
    ctypes.c_uint8.from_address(ctypes.addressof(t) + 20).value = code[0]
    ctypes.c_uint8.from_address(ctypes.addressof(t) + 21).value = code[1]
    ctypes.c_uint16.from_address(ctypes.addressof(t) + 22).value = code[2]
    t[5] = offset
    for i, n in enumerate(shape):
        (ctypes.c_int64 * 4).in_dll(lib, "shape")[i] = n
    ctypes.c_int.in_dll(lib, "use_strides").value = strides is not None
    for i, n in enumerate(strides or ()):
        (ctypes.c_int64 * 4).in_dll(lib, "strides")[i] = n
    ctypes.c_void_p.in_dll(lib, "current").value = stream or None


@needs_ext
def test_foreign_tensors_on_the_calls_stream_are_read_in_c(probe):
    s = Setup(probe)
    s.exchange[Tensor] = (s.api, True)
    code = 2 | 32 << 8 | 1 << 16
    s.codes[code] = F32
    x = array(s.stream, 0x1000)
    s.plan([x, x], [("o", 0), ("a", 0), ("a", 1), ("c", 3)])
    _set_tensor(probe, ptr=0xF000, offset=8)
    t = Tensor()
    before = probe.calls.value
    assert s.fn((x, t)) is s.made[-1]
    assert s.seen(3) == [s.made[-1].ptr, 0x1000, 0xF008] and probe.calls.value == before + 1
    _set_tensor(probe, shape=(3,), strides=(1,))
    assert s.fn((t, x)) is not None and s.seen(3)[1] == 0xF000       # contiguous strides given

    n = len(s.made)
    declined = [
        dict(stream=9),                     # the producer's stream is another: Python makes the call wait
        dict(device=(1, 0)),                # on the host
        dict(device=(2, 1)),                # on another GPU
        dict(strides=(2,)),                 # not contiguous
        dict(code=(2, 16, 1)),              # a dtype code not met yet
        dict(shape=(4,)),                   # another shape: no plan
    ]
    for case in declined:
        _set_tensor(probe, **case)
        assert s.fn((x, t)) is None, case
    _set_tensor(probe)
    assert s.fn((x, Tensor(requires_grad=True))) is None    # Python says why pyew takes no such tensor
    ctypes.c_int.in_dll(probe.lib, "fail_export").value = 1
    try:
        assert s.fn((x, t)) is None                          # the producer failed: Python reports it
    finally:
        ctypes.c_int.in_dll(probe.lib, "fail_export").value = 0
    assert len(s.made) == n and probe.calls.value == before + 2
    s.codes[code] = None
    assert s.fn((x, t)) is None                              # a dtype pyew does not have


@needs_ext
def test_managed_tensors_are_released_once_read(probe):
    """A type read as a managed tensor (any exchange API but torch's): each export is released
    before the launch, whether the call is replayed or declined."""
    s = Setup(probe)
    s.exchange[Tensor] = (s.api, False)
    s.codes[2 | 32 << 8 | 1 << 16] = F32
    deleted = ctypes.c_int.in_dll(probe.lib, "deleted")
    x = array(s.stream, 0x1000)
    s.plan([x, x], [("o", 0), ("a", 0), ("a", 1), ("c", 3)])
    _set_tensor(probe, ptr=0xE000)
    before, calls = deleted.value, probe.calls.value
    t = Tensor(requires_grad=True)              # not asked of a managed tensor's type
    assert s.fn((t, x)) is s.made[-1] and s.seen(3)[1] == 0xE000
    _set_tensor(probe, stream=9)
    assert s.fn((t, x)) is None
    assert deleted.value == before + 2 and probe.calls.value == calls + 1


@needs_ext
def test_a_types_own_reader(probe):
    """A foreign type read by a function of pyew's (CuPy's arrays): its answer, or None to leave
    the call to Python."""
    s = Setup(probe)
    x = array(s.stream, 0x1000)
    s.plan([x, x], [("o", 0), ("a", 0), ("a", 1), ("c", 3)])
    answers = {"t": (0xD000, F32, (3,)), "other": (0xD000, F32, (4,)), "no": None, "bad": (0xD000, F32, [3])}
    asked = []

    def reader(t, stream):
        asked.append((t.requires_grad, stream))
        return answers[t.requires_grad]
    s.exchange[Tensor] = reader
    calls = probe.calls.value
    assert s.fn((Tensor("t"), x)) is s.made[-1] and s.seen(3)[1] == 0xD000
    for which in ("other", "no", "bad"):
        assert s.fn((Tensor(which), x)) is None, which
    assert asked == [(w, s.stream) for w in ("t", "other", "no", "bad")] and probe.calls.value == calls + 1

    def broken(t, stream):
        raise RuntimeError("reader failed")
    s.exchange[Tensor] = broken
    with pytest.raises(RuntimeError, match="reader failed"):
        s.fn((Tensor(), x))


@needs_ext
def test_native_forms_must_fit_their_entry(probe):
    s = Setup(probe)
    ext = s.ext
    with pytest.raises(TypeError, match="not a function bind"):
        ext.native(len, [], (3,), F32, 3)
    with pytest.raises(ValueError, match="takes 7 arguments, 2 slots"):
        ext.native(s.entry, [("o", 0), ("a", 0)], (3,), F32, 3)
    with pytest.raises(ValueError, match="unknown source"):
        ext.native(s.entry, [("x", 0)] * 7, (3,), F32, 3)
    with pytest.raises(ValueError, match="does not fit argument kind l"):
        ext.native(s.entry, [("o", 0), ("a", 0), ("a", 1), ("a", 2), ("s", 0), ("d", 0), ("d", 1)], (3,), F32, 3)
    with pytest.raises(ValueError, match="does not fit argument kind p"):
        ext.native(s.entry, [("o", 0), ("a", 0), ("d", 1), ("c", 3), ("s", 0), ("d", 0), ("d", 1)], (3,), F32, 3)
    with pytest.raises(TypeError, match="argument 3 must be a 64-bit integer"):
        ext.native(s.entry, [("o", 0), ("a", 0), ("a", 1), ("c", "3"), ("s", 0), ("d", 0), ("d", 1)], (3,), F32, 3)
    with pytest.raises(TypeError, match="must be dicts"):
        ext.replayer(s.target, 2, [], s.stream_of, s.new, DeviceArray, {}, {}, s.check, s, s.launches, call.NUMBERS)
    with pytest.raises(TypeError, match="numbers a frozenset"):
        ext.replayer(s.target, 2, {}, s.stream_of, s.new, DeviceArray, {}, {}, s.check, s, s.launches, [float])


@needs_ext
def test_a_type_read_some_other_way_is_left_to_python(probe):
    s = Setup(probe)
    s.codes[2 | 32 << 8 | 1 << 16] = F32
    _set_tensor(probe)
    x = array(s.stream, 0x1000)
    s.plan([x, x], [("o", 0), ("a", 0), ("a", 1), ("c", 3)])
    s.exchange[Tensor] = (s.api, True)
    assert s.fn((Tensor(), x)) is not None
    for how in (s.api, (s.api,), (s.api, True, 0), None):     # not a reader, nor an (API, plain) pair
        s.exchange[Tensor] = how
        assert s.fn((Tensor(), x)) is None, how


@needs_ext
def test_an_argument_whose_type_cannot_be_hashed_raises_as_python_would(probe):
    class Unhashable(type):
        __hash__ = None

    class Odd(metaclass=Unhashable):
        pass
    s = Setup(probe)
    x = array(s.stream, 0x1000)
    with pytest.raises(TypeError, match="unhashable"):
        s.fn((x, Odd()))
    with pytest.raises(TypeError, match="unhashable"):
        call.plan_key(s.target, [x, Odd()])
    assert s.made == []


@needs_ext
def test_replays_and_declines_leak_no_references(probe):
    import sys
    s = Setup(probe, kinds="pppl" + "pii")
    s.exchange[Tensor] = (s.api, True)
    s.codes[2 | 32 << 8 | 1 << 16] = F32
    _set_tensor(probe)
    x, t = array(Stream(handle=9), 0x1000), Tensor()
    plan = s.plan([x, x], [("o", 0), ("a", 0), ("a", 1), ("c", 3)])
    watched = (x, t, s.stream, F32, plan, plan.native, s.target, Tensor, x.shape)

    def counts():
        return [sys.getrefcount(o) for o in watched]
    s.fn((x, t))
    s.made.clear()
    x.buffer.reads.clear()
    before = counts()
    for _ in range(200):
        s.fn((x, t))                  # replayed (x read on the call's stream each time)
        s.fn((x, 0.5))                # no plan
        s.fn((x, [1.0]))              # not read here
        _set_tensor(probe, stream=9)
        s.fn((x, t))                  # a foreign tensor declined
        _set_tensor(probe)
    assert len(x.buffer.reads) == 200            # read on the call's stream by each replay alone
    s.made.clear()
    x.buffer.reads.clear()
    assert counts() == before
