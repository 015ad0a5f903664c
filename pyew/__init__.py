"""pyew: elementwise GPU kernels generated from a spec, run from Python.

    import numpy as np, pyew
    pyew.gelu(np.linspace(-5, 5, 11, dtype=np.float32))     # numpy in, numpy out
    x = pyew.asarray(np.random.rand(1 << 20).astype(np.float16))
    y = pyew.add(x, x)                                        # DeviceArray in, DeviceArray out

Every op of the loaded libew.so is a function of this module (pyew.ops() lists them). The library
is loaded on first use, so `import pyew` itself needs neither the library nor a GPU.
"""
from __future__ import annotations

from . import dtypes, library, opcall, special  # special registers the special kinds
from .array import DeviceArray, asarray, empty, zeros
from .errors import CudaError, LibraryError, NoDeviceError, PyewError
from .runtime import Stream, current_stream, device_info, synchronize

__all__ = ["DeviceArray", "asarray", "empty", "zeros", "Stream", "current_stream", "synchronize",
           "device_info", "ops", "PyewError", "CudaError", "LibraryError", "NoDeviceError", "dtypes"]


def ops() -> list[dict]:
    """Every op of the loaded library: name, kind, arity, inputs, params, dtypes, doc."""
    opcall.table()
    out = []
    for info in library.get().manifest["ops"]:
        out.append({
            "name": info["name"], "kind": info["kind"], "arity": len(info["inputs"]),
            "inputs": list(info["inputs"]),
            "params": {p["name"]: p["default"] for p in info["params"]},
            "dtypes": [k["dtype"] for k in info["kernels"]],
            "doc": info["doc"],
        })
    return out


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    fn = opcall.table().get(name)
    if fn is None:
        raise AttributeError(f"module 'pyew' has no attribute {name!r} (not an op of the loaded library; "
                             "see pyew.ops())")
    return fn


def __dir__():
    names = list(globals())
    try:
        names += list(opcall.table())
    except PyewError:
        pass
    return sorted(names)
