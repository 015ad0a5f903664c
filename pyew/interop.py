"""GPU arrays of other libraries in (PyTorch, CuPy, JAX, Numba, ...): the CUDA Array Interface
(v2 and v3) and DLPack, without copying, with the producer's stream honoured through an event
wait, never a device sync. (Out is DeviceArray's own business: array.py.)

Which protocol is used is decided once per type: the CUDA Array Interface when the type's
interface carries a `stream` (v3: the producer says what to wait for, and reading a dict is the
cheapest import), else DLPack when the type has it (the producer orders its work before the
stream pyew passes), else a v2 interface, whose producer promises the data is ready.

A type that offers DLPack's C exchange API (`__dlpack_c_exchange_api__`: PyTorch from 2.10) is
read through it by pyew's C extension, one C call per operand for the pointer, dtype, shape,
contiguity and the library's current stream. Otherwise PyTorch tensors and CuPy arrays are read
through their own attributes. Either way pyew's stream waits for the library's current stream:
the contract DLPack and the CUDA Array Interface give, without building a capsule or a dict on
every call (a DLPack capsule costs tens of microseconds in torch).
"""
from __future__ import annotations

import sys

import numpy as np

from . import dlpack, library
from . import dtypes as dt
from . import runtime as rt
from .array import DeviceArray, Foreign, from_host, keep_view, lookup_dtype, release_finished, target_device
from .errors import LibraryError

_CUDA_DEVICES = (dlpack.KDL_CUDA, dlpack.KDL_CUDA_MANAGED)
_cai_v3: dict[type, bool] = {}      # type -> its interface carries a stream


def _stream_arg(stream) -> int:
    """The stream handle to give a producer: 1 is the legacy default stream."""
    return stream.handle or 1


def import_device(obj, stream, op: str = "pyew", name: str = "input") -> DeviceArray | None:
    """A DeviceArray over a foreign GPU array's memory (no copy), or None if obj is not on a GPU
    (numpy arrays, CPU tensors, lists: the caller treats them as host data)."""
    t = type(obj)
    reader = _readers.get(t, False)
    if reader is False:
        reader = _readers[t] = _native_reader(t)
    if reader is not None:
        return reader(obj, stream, op, name)
    if _cai_v3.get(t):
        try:
            cai = obj.__cuda_array_interface__
        except AttributeError:      # an instance of the type that is not on the GPU
            return None
        return _from_cai(obj, cai, stream, op, name)
    if hasattr(t, "__dlpack__") and hasattr(t, "__dlpack_device__"):
        try:
            kind, _ = obj.__dlpack_device__()
        except Exception:
            kind = None
        if kind not in _CUDA_DEVICES:
            return None
        if t not in _cai_v3 and hasattr(t, "__cuda_array_interface__"):
            try:
                cai = obj.__cuda_array_interface__
            except Exception:
                cai = None
            _cai_v3[t] = isinstance(cai, dict) and "stream" in cai
            if _cai_v3[t]:
                return _from_cai(obj, cai, stream, op, name)
        return _from_dlpack(obj, stream, op, name)
    if hasattr(t, "__cuda_array_interface__"):
        try:
            cai = obj.__cuda_array_interface__
        except Exception:     # e.g. a CPU tensor whose type has the property
            return None
        if t not in _cai_v3:
            _cai_v3[t] = isinstance(cai, dict) and "stream" in cai
        return _from_cai(obj, cai, stream, op, name)
    return None


def _contiguous_fix(obj) -> str:
    mod = type(obj).__module__.split(".")[0]
    return {"torch": ".contiguous()", "cupy": "cupy.ascontiguousarray(x)",
            "jax": "jax.numpy.copy(x)", "numba": "a contiguous copy"}.get(mod, "a C-contiguous copy")


def _check_contiguous(obj, shape, strides, unit: int, op, name) -> None:
    if strides is None or 0 in tuple(shape):     # an empty array has no layout to check
        return
    want = 1
    for n, s in zip(reversed(shape), reversed(tuple(strides))):
        if n > 1 and s != want * unit:
            raise ValueError(f"{op}: {name!r} is a non-contiguous {type(obj).__name__} (shape {tuple(shape)}, "
                             f"strides {tuple(strides)}); pyew takes C-contiguous GPU arrays: pass "
                             f"{_contiguous_fix(obj)}")
        want *= n


def _from_cai(obj, cai: dict, stream, op, name) -> DeviceArray:
    try:
        shape = tuple(cai["shape"])
        typestr = cai["typestr"]
        ptr, read_only = cai["data"]
    except (KeyError, TypeError, ValueError):
        raise TypeError(f"{op}: {name!r} has a malformed __cuda_array_interface__") from None
    if cai.get("mask") is not None:
        raise TypeError(f"{op}: {name!r} is a masked array (__cuda_array_interface__ mask); pyew has no masks")
    try:
        info = dt.lookup(typestr)
    except (KeyError, TypeError):
        hint = ""
        if typestr.endswith("V2"):
            hint = (" (bfloat16 cannot travel through the CUDA Array Interface: pass it through DLPack, "
                    "e.g. the tensor itself from torch, which pyew reads with __dlpack__)")
        try:
            shown = f"{np.dtype(typestr).name} ({typestr})"
        except TypeError:
            shown = typestr
        raise TypeError(f"{op}: {name!r} has dtype {shown!r}, which pyew does not support{hint}") from None
    strides = cai.get("strides")
    if strides is not None:
        _check_contiguous(obj, shape, strides, info.itemsize, op, name)
    producer = cai.get("stream")
    if producer == 0:
        raise ValueError(f"{op}: {name!r}'s __cuda_array_interface__ has stream 0, which the interface "
                         "forbids (1 is the legacy default stream)")
    ordinal = rt.pointer_device(int(ptr)) if ptr else stream.ordinal
    if ordinal < 0:
        raise ValueError(f"{op}: {name!r}'s __cuda_array_interface__ points to host memory, not a GPU's; pass it "
                         "as a numpy array (np.asarray) instead")
    _check_device(ordinal, stream, op, name)
    _check_aligned(int(ptr or 0), info, op, name)
    waited = _wait_for(producer, stream, ordinal) if producer is not None and producer != _stream_arg(stream) else None
    return DeviceArray(Foreign(obj, bool(read_only), ordinal, stream, waited), int(ptr or 0), shape, info)


def _wait_for(producer: int, stream, ordinal: int):
    """The call's stream waits for the producer's (a handle on GPU `ordinal`), which is returned:
    it waits for the call's in turn when the import ends (array.Foreign)."""
    waited = rt.foreign_stream(int(producer), ordinal)
    rt.stream_wait(stream, waited)
    return waited


def _from_dlpack(obj, stream, op, name) -> DeviceArray:
    release_finished()
    s = _stream_arg(stream)
    try:
        cap = obj.__dlpack__(stream=s, max_version=dlpack.VERSION)
    except TypeError:          # a producer from before DLPack 1.0: no max_version
        cap = obj.__dlpack__(stream=s)
    imp = dlpack.consume(cap)
    if imp.device[0] not in _CUDA_DEVICES:
        raise ValueError(f"{op}: {name!r} lives on DLPack device {imp.device}, not a GPU")
    _check_device(imp.device[1], stream, op, name)
    info = dlpack.dtype_of(*imp.dtype)
    if info is None:
        raise TypeError(f"{op}: {name!r} has DLPack dtype (code {imp.dtype[0]}, {imp.dtype[1]} bits, "
                        f"{imp.dtype[2]} lanes), which pyew does not support")
    _check_contiguous(obj, imp.shape, imp.strides, 1, op, name)
    _check_aligned(imp.ptr, info, op, name)
    return DeviceArray(Foreign(imp.owner, imp.read_only, imp.device[1], stream), imp.ptr, imp.shape, info)


def _check_aligned(ptr: int, info: dt.DType, op: str, name: str) -> None:
    """The kernels read arrays at whole-element offsets from aligned memory; a pointer between two
    elements (a byte view reinterpreted) would fault on the GPU, so it is refused here."""
    if ptr % info.itemsize:
        raise ValueError(f"{op}: {name!r} starts at address {ptr:#x}, not a multiple of its {info.name} elements' "
                         f"{info.itemsize} bytes; pyew reads arrays aligned to their element size: pass a copy")


def from_dlpack(obj, *, copy: bool | None = None, stream=None) -> DeviceArray:
    """A DeviceArray over another library's GPU array through DLPack (torch, CuPy, JAX, ...),
    without a copy (copy=True makes one), on the GPU the array is on. The producer orders its
    pending work on the array before the current pyew stream of that GPU (or `stream`)."""
    if isinstance(obj, DeviceArray):
        return obj.copy(stream=stream) if copy else obj
    if not (hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__")):
        raise TypeError(f"from_dlpack: a {type(obj).__name__} has no __dlpack__/__dlpack_device__")
    kind, index = obj.__dlpack_device__()
    if kind not in _CUDA_DEVICES:
        raise BufferError(f"from_dlpack: the {type(obj).__name__} is on DLPack device type {kind}, not a GPU; "
                          "pyew.asarray(x) copies host data to the GPU")
    with rt.on(int(index)):
        s = rt.resolve_stream(stream)
        d = _from_dlpack(obj, s, "from_dlpack", "x")
        return d.copy(stream=s) if copy else keep_view(d)


def asarray(obj, dtype=None, stream=None, device=None) -> DeviceArray:
    """A DeviceArray of obj: a DeviceArray as is, a GPU array of another library without a copy
    (CUDA Array Interface or DLPack), anything else through numpy and the transfer engine. With
    dtype, converted on the GPU where it differs. With device (an int or pyew.Device; or a
    stream's GPU), the result is on that GPU: GPU arrays elsewhere are copied there, host data
    goes there; else GPU arrays stay where they are and host data goes to the current GPU."""
    if isinstance(obj, np.ma.MaskedArray):
        raise TypeError("asarray: a masked array, and pyew has no masks (its masked values would be copied as if "
                        "they were data): pass a.filled(value), or a.data to take every element")
    src = device_index(obj) if not isinstance(obj, np.ndarray) else None
    want = target_device(device, stream) if device is not None or stream is not None else None
    if src is None:
        a = np.asarray(obj) if dtype is None else np.asarray(obj, dtype=lookup_dtype(dtype).np)
        if a.dtype == object:
            raise TypeError(f"asarray: a {type(obj).__name__} that numpy reads as objects is not numeric data")
        lookup_dtype(a.dtype)
        with rt.on(rt.current_ordinal() if want is None else want):
            return from_host(a, rt.resolve_stream(stream))
    moved = want is not None and want != src
    with rt.on(src):
        d = obj if isinstance(obj, DeviceArray) else \
            import_device(obj, rt.resolve_stream(None if moved else stream), "asarray", "obj")
    if d is None:
        raise TypeError(f"asarray: a {type(obj).__name__} says it is on GPU {src} but offers neither the CUDA Array "
                        "Interface nor DLPack")
    same = dtype is None or lookup_dtype(dtype) is d.info
    if not moved and same:
        return d if d is obj else keep_view(d)     # the caller's view of the foreign array
    if moved:
        d = d.to_device(want, stream)
    return d if same else d.astype(dtype, stream=stream)


# ---- native readers: PyTorch and CuPy through their own attributes ----------------------------------

_readers: dict[type, object] = {}      # type -> reader function, or None for the generic protocols


def _native_reader(t: type):
    root = t.__module__.split(".")[0]
    reader = _exchange_reader(t)
    if reader is not None:
        return reader
    mod = sys.modules.get(root) if root in ("torch", "cupy") else None
    if mod is None:
        return None
    if root == "torch" and isinstance(getattr(mod, "Tensor", None), type) and issubclass(t, mod.Tensor) \
            and hasattr(mod._C, "_cuda_getCurrentRawStream"):
        return _torch_reader(mod)
    if root == "cupy" and isinstance(getattr(mod, "ndarray", None), type) and issubclass(t, mod.ndarray):
        read, _exchange[t] = _cupy_reader(mod)
        return read
    return None


def _check_device(index: int, stream, op, name):
    if index != stream.ordinal:
        wrong_device(index, stream, op, name)


def _over(owner, read_only: bool, index: int, ptr: int, shape, info, producer: int, stream, op, name) -> DeviceArray:
    """A DeviceArray over memory a reader found on GPU `index` (checked against the call's), once the
    call's stream waits for the producer's current stream `producer` (a handle)."""
    if index != stream.ordinal:
        wrong_device(index, stream, op, name)
    _check_aligned(ptr, info, op, name)
    waited = _wait_for(producer, stream, index) if producer != stream.handle else None
    return DeviceArray(Foreign(owner, read_only, index, stream, waited), ptr, shape, info)


def wrong_device(index: int, stream, op, name):
    raise ValueError(f"{op}: {name!r} is on cuda:{index}, but this call runs on cuda:{stream.ordinal} (the "
                         "device of its first GPU operand, or of stream=); the GPU arrays of one call must be on "
                         "one GPU: move one there first (DeviceArray.to_device, tensor.to, cupy.asarray under "
                         "cupy.cuda.Device)")


def device_index(obj) -> int | None:
    """The GPU a GPU array lives on, read without importing it; None for anything else (numpy
    arrays, scalars, CPU tensors)."""
    t = type(obj)
    if t is DeviceArray:
        return obj.ordinal
    if t is np.ndarray or t in (int, float, bool, complex) or obj is None:
        return None
    root = t.__module__.split(".")[0]
    if root == "torch" and hasattr(obj, "get_device"):
        i = obj.get_device()
        return i if i >= 0 else None
    if root == "cupy" and hasattr(obj, "device") and hasattr(obj.device, "id"):
        return obj.device.id
    if hasattr(t, "__dlpack_device__"):
        try:
            kind, index = obj.__dlpack_device__()
        except Exception:
            return None
        return int(index) if kind in _CUDA_DEVICES else None
    if hasattr(t, "__cuda_array_interface__"):
        try:
            ptr = obj.__cuda_array_interface__["data"][0]
        except Exception:
            return None
        i = rt.pointer_device(int(ptr)) if ptr else -1
        return i if i >= 0 else rt.current_ordinal()      # host memory: the import says so
    return None


def _torch_reader(torch):
    names = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
             "bfloat16": torch.bfloat16, "int32": torch.int32, "int64": torch.int64, "bool": torch.bool,
             "int8": torch.int8, "uint8": torch.uint8, "int16": torch.int16}
    for n in ("uint16", "uint32"):          # torch 2.3 on
        if hasattr(torch, n):
            names[n] = getattr(torch, n)
    by_dtype = {tdt: dt.BY_NAME[n] for n, tdt in names.items()}
    raw_stream = torch._C._cuda_getCurrentRawStream

    def read(t, stream, op, name):
        index = t.get_device()          # -1 off the GPU (CPU, meta)
        if index < 0:
            return None
        info = by_dtype.get(t.dtype)
        if info is None:
            raise TypeError(f"{op}: {name!r} is a {t.dtype} tensor, which pyew does not support")
        if t.requires_grad:
            raise ValueError(f"{op}: {name!r} requires grad; pass t.detach() (pyew's ops are outside autograd)")
        if not t.is_contiguous():
            raise ValueError(f"{op}: {name!r} is a non-contiguous Tensor (shape {tuple(t.shape)}, strides "
                             f"{tuple(t.stride())}); pyew takes C-contiguous GPU arrays: pass .contiguous()")
        # torch's current stream holds its queued work on t
        return _over(t, False, index, t.data_ptr(), tuple(t.shape), info, raw_stream(index), stream, op, name)

    return read


def _cupy_reader(cupy):
    current = cupy.cuda.get_current_stream
    by_dtype: dict = {}

    def read(x, stream, op, name):
        info = by_dtype.get(x.dtype)
        if info is None:
            try:
                info = by_dtype[x.dtype] = dt.lookup(x.dtype)
            except KeyError:
                raise TypeError(f"{op}: {name!r} has dtype {x.dtype}, which pyew does not support") from None
        if not x.flags.c_contiguous:
            raise ValueError(f"{op}: {name!r} is a non-contiguous ndarray (shape {x.shape}, strides {x.strides}); "
                             "pyew takes C-contiguous GPU arrays: pass cupy.ascontiguousarray(x)")
        index = x.device.id
        # CuPy's current stream of x's GPU, as its CUDA Array Interface says
        producer = (current(index) if rt.several() else current()).ptr
        return _over(x, False, index, x.data.ptr, x.shape, info, producer, stream, op, name)

    def replayed(x, stream):
        """What a plan's C replay needs of x, or None where read() must run: a dtype not met yet, a
        layout, address or GPU to refuse, a producer's stream to wait for (one GPU: CuPy's current stream)."""
        mem, info = x.data, by_dtype.get(x.dtype)
        if info is None or mem.device_id != stream.ordinal or current().ptr != stream.handle or \
                not x.flags.c_contiguous or mem.ptr % info.itemsize:
            return None
        return mem.ptr, info, x.shape

    return read, replayed


_dl_dtypes: dict[int, dt.DType | None] = {}      # code | bits << 8 | lanes << 16 -> dtype row
_exchange: dict[type, object] = {}     # type -> how a plan's C replay reads it (replay_readers)


def replay_readers() -> dict:
    """How a plan's C replay (pyew/_ewcall.c: replayer) reads the foreign types met so far: (the
    type's DLPack exchange API capsule, whether its arrays are read as plain tensors rather than
    managed ones), or, for CuPy's arrays (no such API), a function reader(x, stream) giving
    (address, dtype row, shape), or None where x must go through the Python reader."""
    return _exchange


def dlpack_dtypes() -> dict:
    """DLPack dtype codes (code | bits << 8 | lanes << 16) met so far, each with its dtype row, or
    None where pyew has no such dtype."""
    return _dl_dtypes


def _exchange_reader(t: type):
    """A reader through the type's DLPack C exchange API, or None where the type has none (or one
    of another major version) or pyew runs without its C extension. A torch tensor is read as the
    plain tensor the API offers (torch's tensors are writable; whether one requires grad is asked
    of the tensor, as DLPack does not say); any other type as a managed tensor, whose flags say
    whether it is read-only."""
    api = getattr(t, "__dlpack_c_exchange_api__", None)
    if api is None:
        return None
    try:
        ext = library.get().ext
    except LibraryError:                   # no library (an import alone needs none): the readers below serve
        return None
    if ext is None or not hasattr(ext, "dlpack_view"):
        return None
    try:
        ext.dlpack_version(api)
    except (TypeError, ValueError):        # not such a capsule, or a major version pyew cannot read
        return None
    # a subclass of torch.Tensor defined elsewhere inherits torch's API and tensors (requires_grad)
    torch = any(getattr(k, "__module__", "").split(".")[0] == "torch" for k in t.__mro__)
    view, owned = ext.dlpack_view, not torch
    _exchange[t] = (api, not owned)

    def read(x, stream, op, name):
        try:
            ptr, kind, index, code, shape, contiguous, producer, read_only = view(api, x, owned)
        except Exception as e:
            raise TypeError(f"{op}: {name!r}, a {type(x).__name__}, cannot be read through DLPack: {e}") from None
        if kind not in _CUDA_DEVICES:
            return None
        info = _dl_dtypes.get(code, False)
        if info is False:
            info = _dl_dtypes[code] = dlpack.dtype_of(code & 0xFF, (code >> 8) & 0xFF, code >> 16)
        if info is None:
            shown = getattr(x, "dtype", f"DLPack code {code & 0xFF}, {(code >> 8) & 0xFF} bits")
            raise TypeError(f"{op}: {name!r} is a {type(x).__name__} of dtype {shown}, which pyew does not support")
        if torch and x.requires_grad:
            raise ValueError(f"{op}: {name!r} requires grad; pass t.detach() (pyew's ops are outside autograd)")
        if not contiguous:
            raise ValueError(f"{op}: {name!r} is a non-contiguous {type(x).__name__} (shape {shape}); pyew takes "
                             f"C-contiguous GPU arrays: pass {_contiguous_fix(x)}")
        return _over(x, read_only, index, ptr, shape, info, producer, stream, op, name)

    return read
