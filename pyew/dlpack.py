"""DLPack capsules with ctypes: the structs of dlpack.h (1.x, versioned and legacy), making a
capsule for memory pyew owns, and taking over a capsule another library made.

Only memory layout and ownership live here; which arrays and streams are involved is the business
of array.py (export) and interop.py (import).
"""
from __future__ import annotations

import ctypes
import sys
import threading
from dataclasses import dataclass

from . import dtypes as dt

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13
KDL_INT, KDL_UINT, KDL_FLOAT, KDL_BFLOAT, KDL_BOOL = 0, 1, 2, 4, 6
FLAG_READ_ONLY, FLAG_IS_COPIED = 1, 2
VERSION = (1, 1)                     # the dlpack.h this module follows

_NAME = b"dltensor"
_NAME_V = b"dltensor_versioned"
_USED = b"used_dltensor"
_USED_V = b"used_dltensor_versioned"


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
# The capsule destructor gets the capsule as a raw pointer (it is being destroyed): separate
# prototypes that take it as void*.
_IsValidRaw = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_GetPointerRaw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))
_DeleterFn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


# ---- dtypes --------------------------------------------------------------------------------------

def dtype_code(info: dt.DType) -> tuple[int, int]:
    """(DLPack type code, bits) of a pyew dtype."""
    if info.name == "bfloat16":
        return KDL_BFLOAT, 16
    if info.kind == "bool":
        return KDL_BOOL, 8        # one byte per element, 0 or 1 (dlpack.h's kDLBool)
    if info.kind == "float":
        return KDL_FLOAT, info.itemsize * 8
    return (KDL_UINT if info.name.startswith("u") else KDL_INT), info.itemsize * 8


_BY_CODE = {dtype_code(d): d for d in dt.TABLE}


def dtype_of(code: int, bits: int, lanes: int) -> dt.DType | None:
    if lanes != 1:
        return None
    return _BY_CODE.get((code, bits))


# ---- export: capsules for pyew's memory -----------------------------------------------------------

_live: dict[int, tuple] = {}          # struct address -> (struct, shape, strides, owner)
_live_lock = threading.RLock()


@_DeleterFn
def _deleter(addr):
    with _live_lock:
        _live.pop(addr, None)          # drops the struct and the owner's reference


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule):
    # A capsule nobody consumed (still named dltensor[_versioned]) owns its tensor: delete it.
    if sys.is_finalizing():
        return
    for name in (_NAME_V, _NAME):
        if _IsValidRaw(capsule, name):
            _deleter(_GetPointerRaw(capsule, name))
            return


def export(ptr: int, shape: tuple[int, ...], info: dt.DType, device_id: int, owner, *,
           versioned: bool, version: tuple[int, int] = VERSION, read_only: bool = False,
           copied: bool = False):
    """A DLPack capsule over the C-contiguous device array at ptr; `owner` is kept alive until
    the consumer calls the deleter (or the capsule dies unconsumed)."""
    nd = len(shape)
    shape_arr = (ctypes.c_int64 * max(nd, 1))(*shape)
    strides = []
    step = 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    strides_arr = (ctypes.c_int64 * max(nd, 1))(*reversed(strides))
    if versioned:
        m = DLManagedTensorVersioned()
        m.version.major, m.version.minor = version
        m.flags = (FLAG_READ_ONLY if read_only else 0) | (FLAG_IS_COPIED if copied else 0)
    else:
        m = DLManagedTensor()
    t = m.dl_tensor
    t.data = ptr or None
    t.device.device_type, t.device.device_id = KDL_CUDA, device_id
    t.ndim = nd
    t.dtype.code, t.dtype.bits = dtype_code(info)
    t.dtype.lanes = 1
    t.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(strides_arr, ctypes.POINTER(ctypes.c_int64))
    t.byte_offset = 0
    m.deleter = ctypes.cast(_deleter, ctypes.c_void_p).value
    addr = ctypes.addressof(m)
    with _live_lock:
        _live[addr] = (m, shape_arr, strides_arr, owner)
    return _api.PyCapsule_New(addr, _NAME_V if versioned else _NAME,
                              ctypes.cast(_capsule_destructor, ctypes.c_void_p).value)


def live_exports() -> int:
    """Capsules made and not yet released by their consumers (tests use it)."""
    return len(_live)


# ---- import: taking over another library's capsule ------------------------------------------------

class Managed:
    """Ownership of a consumed capsule's tensor: its deleter runs when this object is dropped."""
    __slots__ = ("addr", "deleter", "__weakref__")

    def __init__(self, addr: int, deleter: int | None):
        self.addr = addr
        self.deleter = deleter

    def __del__(self):
        if self.deleter and not sys.is_finalizing():
            d, self.deleter = self.deleter, None
            _DeleterFn(d)(self.addr)

    def take(self) -> tuple[int, int] | None:
        """(address, deleter) for whoever releases the tensor instead of this object, once: an
        import that must wait for its GPU work first (array.Foreign), whatever order the garbage
        collector finalizes the two in."""
        d, self.deleter = self.deleter, None
        return (self.addr, d) if d else None


def run_deleter(taken: tuple[int, int]) -> None:
    """Release a tensor whose deleter Managed.take handed over."""
    addr, d = taken
    _DeleterFn(d)(addr)


@dataclass(frozen=True)
class Imported:
    ptr: int                         # data + byte_offset
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None  # in elements; None: C-contiguous
    dtype: tuple[int, int, int]      # code, bits, lanes
    device: tuple[int, int]          # device type, id
    read_only: bool
    owner: Managed


def consume(capsule) -> Imported:
    """Take over a DLPack capsule (renaming it used_*, so its producer's destructor leaves it be)."""
    if type(capsule).__name__ != "PyCapsule":
        raise TypeError(f"__dlpack__ returned a {type(capsule).__name__}, not a DLPack capsule")
    if _api.PyCapsule_IsValid(capsule, _NAME_V):
        addr = _api.PyCapsule_GetPointer(capsule, _NAME_V)
        m = DLManagedTensorVersioned.from_address(addr)
        if m.version.major != 1:
            raise BufferError(f"DLPack capsule of version {m.version.major}.{m.version.minor}; "
                              "pyew reads version 1.x")
        read_only = bool(m.flags & FLAG_READ_ONLY)
        _api.PyCapsule_SetName(capsule, _USED_V)
    elif _api.PyCapsule_IsValid(capsule, _NAME):
        addr = _api.PyCapsule_GetPointer(capsule, _NAME)
        m = DLManagedTensor.from_address(addr)
        read_only = False
        _api.PyCapsule_SetName(capsule, _USED)
    else:
        raise BufferError("the DLPack capsule was already consumed (or is not a dltensor capsule)")
    owner = Managed(addr, m.deleter)
    t = m.dl_tensor
    nd = int(t.ndim)
    shape = tuple(int(t.shape[i]) for i in range(nd))
    strides = tuple(int(t.strides[i]) for i in range(nd)) if t.strides else None
    return Imported((t.data or 0) + int(t.byte_offset), shape, strides,
                    (int(t.dtype.code), int(t.dtype.bits), int(t.dtype.lanes)),
                    (int(t.device.device_type), int(t.device.device_id)), read_only, owner)
