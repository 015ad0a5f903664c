"""pyew: elementwise GPU kernels generated from a spec, run from Python.

    import numpy as np, pyew
    pyew.gelu(np.linspace(-5, 5, 11, dtype=np.float32))     # numpy in, numpy out
    x = pyew.asarray(np.random.rand(1 << 20).astype(np.float16))
    y = pyew.add(x, x)                                        # DeviceArray in, DeviceArray out
    pyew.relu(torch_cuda_tensor)                              # any GPU array in, no copy

Every op of the loaded libew.so is a function of this module (pyew.ops() lists them). The library
is loaded on first use, so `import pyew` itself needs neither the library nor a GPU.
"""
from __future__ import annotations

from . import dtypes, library, ufuncs
from . import kinds as _kinds
from .array import DeviceArray, empty, zeros
from .errors import CompileError, CudaError, LibraryError, NoDeviceError, PyewError, SpecError
from .formula import FormulaError
from .fused import evaluate, fuse
from .interop import asarray, from_dlpack
from .pinned import empty_pinned
from .runtime import Device, ExternalStream, Stream, current_stream, device_count, device_info, synchronize
from .specs import load_spec
from .transfer import set_transfer_limits, transfer_limits
from .version import __version__

__all__ = ["DeviceArray", "asarray", "from_dlpack", "empty", "zeros", "empty_pinned", "Device", "device_count",
           "Stream", "ExternalStream", "current_stream", "synchronize", "device_info", "ops", "set_transfer_limits",
           "transfer_limits", "evaluate", "fuse", "load_spec", "FormulaError", "SpecError", "CompileError", "PyewError",
           "CudaError", "LibraryError", "NoDeviceError", "dtypes", "ufuncs", "__version__"]


def ops() -> list[dict]:
    """Every function of the loaded library: name, kind, arity, inputs, params (name: default,
    None where it has none), required (the params without a default), dtypes, doc, as its Python
    function takes them. A spec op that binds more than one function (upsample_nearest2d and its
    _backward) lists each."""
    import inspect
    table = _kinds.table()
    manifest = library.get().manifest
    out = []
    for op in manifest.ops:
        names = [op.name] + [n for n in table if n.startswith(op.name + "_") and manifest.op(n) is None]
        for name in names:
            if any(e["name"] == name for e in out):
                continue
            fn = table[name]
            ps = list(inspect.signature(fn).parameters.values())
            named = [p for p in ps if p.kind is not p.POSITIONAL_ONLY and p.name not in ("out", "stream")]
            inputs = [p.name for p in ps if p.kind is p.POSITIONAL_ONLY]
            out.append({"name": name, "kind": op.kind, "arity": len(inputs), "inputs": inputs,
                        "params": {p.name: (None if p.default is p.empty else p.default) for p in named},
                        "required": [p.name for p in named if p.default is p.empty],
                        "dtypes": [k.dtype.name for k in op.kernels],
                        "doc": op.doc if name == op.name else (fn.__doc__ or "").split("\n")[0]})
    return out


_bound: set[str] = set()


def __getattr__(name: str):
    if name.startswith("_"):
        raise AttributeError(name)
    if name == "dask":              # pyew.dask needs dask: imported on first use, like the ops
        import importlib
        try:
            return importlib.import_module(".dask", __name__)
        except ImportError as e:    # hasattr(pyew, "dask") is then False, and the error says why
            raise AttributeError(f"module 'pyew' has no attribute 'dask': {e}") from e
    try:
        fn = _kinds.table().get(name)
    except PyewError as e:          # no library: hasattr() and getattr(pyew, name, default) still work
        raise AttributeError(f"module 'pyew' has no attribute {name!r}: the op table cannot load ({e})") from None
    if fn is None:
        raise AttributeError(f"module 'pyew' has no attribute {name!r} (not an op of the loaded library; "
                             "see pyew.ops())")
    # Bound as a module attribute, so later lookups skip this hook; forgotten with the op table.
    globals()[name] = fn
    _bound.add(name)
    return fn


def _forget_ops() -> None:
    g = globals()
    for name in _bound:
        g.pop(name, None)
    _bound.clear()


_kinds.on_reset(_forget_ops)


def __dir__():
    names = set(globals()) - {"annotations"}
    try:
        names |= set(_kinds.table())
    except PyewError:
        pass
    return sorted(names)
