"""pyew: elementwise GPU kernels generated from a spec, run from Python.

    import numpy as np, pyew
    pyew.gelu(np.linspace(-5, 5, 11, dtype=np.float32))     # numpy in, numpy out
    x = pyew.asarray(np.random.rand(1 << 20).astype(np.float16))
    y = pyew.add(x, x)                                        # DeviceArray in, DeviceArray out

Every op of the loaded libew.so is a function of this module (pyew.ops() lists them). The library
is loaded on first use, so `import pyew` itself needs neither the library nor a GPU.
"""
from __future__ import annotations

import inspect

from . import dtypes, library, opcall, special  # special registers the special kinds
from .array import DeviceArray, asarray, empty, zeros
from .errors import CudaError, LibraryError, NoDeviceError, PyewError
from .runtime import Stream, current_stream, device_info, synchronize

__all__ = ["DeviceArray", "asarray", "empty", "zeros", "Stream", "current_stream", "synchronize",
           "device_info", "ops", "PyewError", "CudaError", "LibraryError", "NoDeviceError", "dtypes"]


def ops() -> list[dict]:
    """Every function of the loaded library: name, kind, arity, inputs, params, dtypes, doc. A
    spec op that binds more than one function (upsample_nearest2d and its _backward) lists each."""
    table = opcall.table()
    manifest_ops = library.get().manifest["ops"]
    listed = {info["name"] for info in manifest_ops}
    out = []
    for info in manifest_ops:
        entry = {
            "name": info["name"], "kind": info["kind"], "arity": len(info["inputs"]),
            "inputs": list(info["inputs"]),
            "params": {p["name"]: p["default"] for p in info["params"]},
            "dtypes": [k["dtype"] for k in info["kernels"]],
            "doc": info["doc"],
        }
        out.append(entry)
        for name, fn in table.items():
            if name.startswith(info["name"] + "_") and name not in listed:
                listed.add(name)
                ps = list(inspect.signature(fn).parameters.values())
                inputs = [p.name for p in ps if p.kind is p.POSITIONAL_ONLY]
                params = {p.name: (None if p.default is p.empty else p.default) for p in ps
                          if p.kind is not p.POSITIONAL_ONLY and p.name not in ("out", "stream")}
                out.append(dict(entry, name=name, arity=len(inputs), inputs=inputs, params=params,
                                doc=(fn.__doc__ or "").split("\n")[0]))
    return out


_bound_ops: set[str] = set()


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    fn = opcall.table().get(name)
    if fn is None:
        raise AttributeError(f"module 'pyew' has no attribute {name!r} (not an op of the loaded library; "
                             "see pyew.ops())")
    # Bound as a module attribute, so later lookups skip this hook (about 1 µs a call);
    # opcall.reset() forgets them with the table.
    globals()[name] = fn
    _bound_ops.add(name)
    return fn


def _forget_ops() -> None:
    g = globals()
    for name in _bound_ops:
        g.pop(name, None)
    _bound_ops.clear()


def __dir__():
    names = list(globals())
    try:
        names += list(opcall.table())
    except PyewError:
        pass
    return sorted(names)
