"""DeviceArray: a contiguous n-d array in GPU memory, allocated from the stream-ordered pool."""
from __future__ import annotations

import operator
import sys

import numpy as np

from . import dtypes as dt
from . import runtime as rt


class _Buffer:
    """Owns one pool allocation. Freed on its own stream when the last view goes away; streams it
    was used on besides that one are waited for first, so the free cannot overtake their work."""
    __slots__ = ("ptr", "nbytes", "stream", "others", "__weakref__")

    def __init__(self, nbytes: int, stream):
        self.ptr = rt.malloc(nbytes, stream)
        self.nbytes = nbytes
        self.stream = stream
        self.others = None

    def used_on(self, stream) -> None:
        if stream is not self.stream:
            if self.others is None:
                self.others = []
            if stream not in self.others:
                self.others.append(stream)

    def __del__(self):
        if not self.ptr or sys.is_finalizing():
            return
        try:
            for s in self.others or ():
                rt.stream_wait(self.stream, s)
            rt.free(self.ptr, self.stream, self.nbytes)
        except Exception:   # never raise from a finalizer (e.g. the context is gone at exit)
            pass
        self.ptr = 0


def _normalize_shape(shape) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    try:
        shape = tuple(operator.index(s) for s in shape)
    except TypeError:
        raise TypeError(f"shape must be an int or a tuple of ints, not {shape!r}") from None
    if any(s < 0 for s in shape):
        raise ValueError(f"negative dimension in shape {shape}")
    return shape


class DeviceArray:
    """A C-contiguous array on the GPU. Ops take and return DeviceArrays without host copies;
    .get() or np.asarray() brings the data back."""
    __slots__ = ("_buf", "ptr", "shape", "dtype", "_info", "size", "__weakref__")

    def __init__(self, buf: _Buffer, ptr: int, shape: tuple[int, ...], info: dt.DType):
        self._buf = buf
        self.ptr = ptr
        self.shape = shape
        self._info = info
        self.dtype = info.np
        size = 1
        for s in shape:
            size *= s
        self.size = size

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def _alloc(cls, shape, info: dt.DType, stream) -> "DeviceArray":
        size = 1
        for s in shape:
            size *= s
        buf = _Buffer(size * info.itemsize, stream)
        return cls(buf, buf.ptr, shape, info)

    # -- properties ---------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        return self._info.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self._info.itemsize

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False),
                "version": 3, "strides": None}

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d DeviceArray")
        return self.shape[0]

    # -- host transfer ------------------------------------------------------------------------
    def get(self, stream=None, out: np.ndarray | None = None) -> np.ndarray:
        """Copy to a new numpy array (or into `out`) and wait for the copy."""
        s = rt.resolve_stream(stream)
        if out is None:
            out = np.empty(self.shape, self.dtype)
        elif out.shape != self.shape or out.dtype != self.dtype or not out.flags.c_contiguous:
            raise ValueError(f"out must be a C-contiguous {self.dtype} array of shape {self.shape}, "
                             f"got {out.dtype} {out.shape}")
        if self.size:
            self._buf.used_on(s)
            rt.copy_dtoh(out.ctypes.data, self.ptr, self.nbytes, s)
            s.synchronize()
        return out

    def __array__(self, dtype=None, copy=None):
        a = self.get()
        return a if dtype is None else a.astype(dtype, copy=False)

    # -- views and copies ---------------------------------------------------------------------
    def __getitem__(self, key):
        """Basic indexing on the first axis: d[i] or d[a:b] (step 1); returns a view."""
        if not self.shape:
            raise IndexError("a 0-d DeviceArray cannot be indexed")
        n = self.shape[0]
        row = self.size // n * self.itemsize if n else 0
        if isinstance(key, slice):
            start, stop, step = key.indices(n)
            if step != 1:
                raise ValueError("DeviceArray slices must have step 1 (views stay contiguous); "
                                 "copy to numpy with .get() for strided access")
            stop = max(stop, start)
            return DeviceArray(self._buf, self.ptr + start * row, (stop - start,) + self.shape[1:], self._info)
        try:
            i = operator.index(key)
        except TypeError:
            raise IndexError(f"DeviceArray supports d[i] and d[a:b] on the first axis, not {key!r}") from None
        if not -n <= i < n:
            raise IndexError(f"index {i} is out of bounds for axis 0 with size {n}")
        i %= n
        return DeviceArray(self._buf, self.ptr + i * row, self.shape[1:], self._info)

    def reshape(self, *shape) -> "DeviceArray":
        """A view with another shape of the same size (one dimension may be -1)."""
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        shape = tuple(operator.index(s) for s in shape)
        if shape.count(-1) > 1:
            raise ValueError("only one dimension can be -1")
        if -1 in shape:
            known = 1
            for s in shape:
                if s != -1:
                    known *= s
            if known == 0 or self.size % known:
                raise ValueError(f"cannot reshape array of size {self.size} into shape {shape}")
            shape = tuple(self.size // known if s == -1 else s for s in shape)
        shape = _normalize_shape(shape)
        size = 1
        for s in shape:
            size *= s
        if size != self.size:
            raise ValueError(f"cannot reshape array of size {self.size} into shape {shape}")
        return DeviceArray(self._buf, self.ptr, shape, self._info)

    def copy(self, stream=None) -> "DeviceArray":
        s = rt.resolve_stream(stream)
        out = DeviceArray._alloc(self.shape, self._info, s)
        self._buf.used_on(s)
        rt.copy_dtod(out.ptr, self.ptr, self.nbytes, s)
        return out

    def astype(self, dtype, stream=None) -> "DeviceArray":
        """Convert with the library's cast op `to_<dtype>`; a copy if the dtype is the same."""
        info = _lookup_dtype(dtype)
        if info is self._info:
            return self.copy(stream)
        from .opcall import cast
        return cast(self, info, stream)

    def __repr__(self) -> str:
        head = f"DeviceArray(shape={self.shape}, dtype={self.dtype}"
        if self.size > 1000:
            return head + ")"
        try:
            body = np.array2string(self.get(), separator=", ")
        except Exception as e:    # a broken context should not make repr raise
            return head + f", <unreadable: {e}>)"
        return f"{head},\n  {body})" if "\n" in body else f"{head}, {body})"


def _lookup_dtype(dtype) -> dt.DType:
    try:
        return dt.lookup(dtype)
    except (KeyError, TypeError):
        raise TypeError(f"pyew has no dtype {dtype!r}; it knows {', '.join(dt.BY_NAME)}") from None


def empty(shape, dtype="float32", stream=None) -> DeviceArray:
    """Uninitialised DeviceArray."""
    return DeviceArray._alloc(_normalize_shape(shape), _lookup_dtype(dtype), rt.resolve_stream(stream))


def zeros(shape, dtype="float32", stream=None) -> DeviceArray:
    """DeviceArray of zeros."""
    s = rt.resolve_stream(stream)
    a = DeviceArray._alloc(_normalize_shape(shape), _lookup_dtype(dtype), s)
    if a.size:
        rt.check(rt._rt.cudaMemsetAsync(a.ptr, 0, a.nbytes, s._handle), "cudaMemsetAsync")
    return a


def asarray(obj, dtype=None, stream=None) -> DeviceArray:
    """Copy a numpy array (or anything np.asarray takes) to the GPU; a DeviceArray of the same
    dtype is returned as is."""
    if isinstance(obj, DeviceArray):
        if dtype is None or _lookup_dtype(dtype) is obj._info:
            return obj
        return obj.astype(dtype, stream)
    a = np.asarray(obj) if dtype is None else np.asarray(obj, dtype=_lookup_dtype(dtype).np)
    info = _lookup_dtype(a.dtype)
    a = np.ascontiguousarray(a)
    s = rt.resolve_stream(stream)
    out = DeviceArray._alloc(a.shape, info, s)
    # From pageable memory the copy returns once the data is staged, so `a` may change afterwards.
    rt.copy_htod(out.ptr, a.ctypes.data, a.nbytes, s)
    return out
