"""The libraries pyew is compared with: PyTorch and CuPy on the GPU, numpy and numexpr on the CPU.

The tables below are the only place that maps a pyew op name to a GPU library's call (the CPU
peers' expressions are in cpu_peers.py); the benchmark's op list itself comes from the loaded
library's manifest. An op without an entry here is measured for pyew alone and the run says so
once. Each GPU peer wraps pyew's DeviceArrays zero-copy through __cuda_array_interface__, so every
implementation reads the very same buffers; for numpy in / numpy out, round_trip() wraps an op as
a user would write it (host array to the GPU, op, back to a new numpy array).

A peer that does not import, or sees no GPU, is skipped with a printed note; nothing else changes.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable

from .. import dtypes as dt

# ---- PyTorch -------------------------------------------------------------------------------------
# op name -> builder(torch, params) -> callable(*input tensors). Params are pyew's values for the
# run (the manifest defaults), passed by name so a renamed param shows up as a missing mapping.


def _F(t):
    return t.nn.functional


def _cast(dtype_name):
    return lambda t, p: (lambda x: x.to(getattr(t, dtype_name)))


TORCH_MAP: dict[str, Callable] = {
    "relu": lambda t, p: t.relu,
    "sigmoid": lambda t, p: t.sigmoid,
    "elu": lambda t, p: functools.partial(_F(t).elu, alpha=p["alpha"]),
    "gelu": lambda t, p: _F(t).gelu,
    "gelu_tanh": lambda t, p: functools.partial(_F(t).gelu, approximate="tanh"),
    "silu": lambda t, p: _F(t).silu,
    "hardswish": lambda t, p: _F(t).hardswish,
    "hardshrink": lambda t, p: functools.partial(_F(t).hardshrink, lambd=p["lambd"]),
    "add": lambda t, p: t.add,
    "sub": lambda t, p: t.sub,
    "mul": lambda t, p: t.mul,
    "div": lambda t, p: t.div,
    "scale": lambda t, p: (lambda x, a=p["alpha"]: x * a),
    "add_relu": lambda t, p: (lambda x, y: t.relu(x + y)),     # what a torch user writes: 2 kernels
    "to_float32": _cast("float32"),
    "to_float16": _cast("float16"),
    "to_bfloat16": _cast("bfloat16"),
    "to_float64": _cast("float64"),
    "to_int64": _cast("int64"),
}

# The same ops writing into a given tensor: the bench runs PyTorch on the very buffers pyew runs on.
# Past L2, where an input and an output lie in memory moves either library's throughput by about as
# much as the kernels differ (benchmarks/RESULTS.md, "PyTorch on pyew's buffers"), so a
# PyTorch that allocated its own outputs would be compared on other buffers, not with another kernel.
# relu: on CUDA torch.relu(x) is clamp_min(x, 0), which has an out= form. add_relu: the two kernels
# a torch user writes, the second in place.


def _into(fn):
    return lambda t, p: (lambda *xs, out: fn(t, p)(*xs, out=out))


TORCH_INTO: dict[str, Callable] = {
    "relu": lambda t, p: (lambda x, out: t.clamp_min(x, 0, out=out)),
    "sigmoid": _into(lambda t, p: t.sigmoid),
    "elu": lambda t, p: (lambda x, out, a=p["alpha"]: t._C._nn.elu(x, a, out=out)),
    "gelu": _into(lambda t, p: t._C._nn.gelu),
    "gelu_tanh": lambda t, p: (lambda x, out: t._C._nn.gelu(x, approximate="tanh", out=out)),
    "silu": _into(lambda t, p: t._C._nn.silu),
    "hardswish": _into(lambda t, p: t._C._nn.hardswish),
    "hardshrink": lambda t, p: (lambda x, out, la=p["lambd"]: t.ops.aten.hardshrink.out(x, la, out=out)),
    "add": _into(lambda t, p: t.add),
    "sub": _into(lambda t, p: t.sub),
    "mul": _into(lambda t, p: t.mul),
    "div": _into(lambda t, p: t.div),
    "scale": lambda t, p: (lambda x, out, a=p["alpha"]: t.mul(x, a, out=out)),
    "add_relu": lambda t, p: (lambda x, y, out: t.relu_(t.add(x, y, out=out))),
    **{f"to_{d}": lambda t, p: (lambda x, out: out.copy_(x))
       for d in ("float32", "float16", "bfloat16", "float64", "int64")},
}

# The Python-API suites' torch counterparts: name -> builder(torch) -> callable.
TORCH_API: dict[str, Callable] = {
    "upsample_nearest2d": lambda t: (lambda x: _F(t).interpolate(x, scale_factor=2, mode="nearest")),
    "upsample_nearest2d_backward": lambda t: (
        lambda dy: t.ops.aten.upsample_nearest2d_backward(
            dy, [dy.shape[2], dy.shape[3]], [dy.shape[0], dy.shape[1], dy.shape[2] // 2, dy.shape[3] // 2])),
    "relu": lambda t: t.relu,
    "threshold_backward": lambda t: (lambda dy, y: t.ops.aten.threshold_backward(dy, y, 0)),
    "dot": lambda t: t.dot,
    "add": lambda t: t.add,
    "sigmoid": lambda t: t.sigmoid,
}

# ---- CuPy ----------------------------------------------------------------------------------------
# Activations as ElementwiseKernels (one kernel, computed in C: float for float32/float16, double for
# float64, the integer type for integers); arithmetic and casts through CuPy's own ufuncs/astype.
# {name} placeholders take the op's param values.

CUPY_UNARY_EK: dict[str, str] = {
    "relu": "y = (T)(v < (C)0 ? (C)0 : v)",
    "sigmoid": "y = (T)((C)1 / ((C)1 + exp(-v)))",
    "elu": "y = (T)(v > (C)0 ? v : (C)({alpha}) * expm1(v))",
    "gelu": "y = (T)(v * (C)0.5 * erfc(-v * (C)0.7071067811865476))",
    "gelu_tanh": "y = (T)((C)0.5 * v * ((C)1 + tanh((C)0.7978845608028654 * (v + (C)0.044715 * v * v * v))))",
    "silu": "y = (T)(v / ((C)1 + exp(-v)))",
    "hardswish": "C u = v + (C)3; u = u < (C)0 ? (C)0 : (u > (C)6 ? (C)6 : u); y = (T)(v * u / (C)6)",
    "hardshrink": "y = (T)((v >= -(C)({lambd}) && v <= (C)({lambd})) ? (C)0 : v)",
}
CUPY_BINARY_EK: dict[str, str] = {
    "add_relu": "C s = (C)x + (C)y; z = (T)(s < (C)0 ? (C)0 : s)",
}


def _ufunc(name):
    return lambda cp, p: getattr(cp, name)


CUPY_MAP: dict[str, Callable] = {
    "add": _ufunc("add"),
    "sub": _ufunc("subtract"),
    "mul": _ufunc("multiply"),
    "div": _ufunc("divide"),
    "scale": lambda cp, p: (lambda x, a=p["alpha"]: cp.multiply(x, a)),
    "to_float32": lambda cp, p: (lambda x: x.astype(cp.float32)),
    "to_float16": lambda cp, p: (lambda x: x.astype(cp.float16)),
    "to_float64": lambda cp, p: (lambda x: x.astype(cp.float64)),
    "to_int64": lambda cp, p: (lambda x: x.astype(cp.int64)),
}

_COMPUTE = {"float64": "double", "float32": "float", "float16": "float", "int32": "int", "int64": "long long"}


# ---- zero-copy views -------------------------------------------------------------------------------

class _Interface:
    """A bare __cuda_array_interface__ carrier: lets a DeviceArray be seen with another typestr
    (bfloat16 as int16, which torch reinterprets; numpy's name for ml_dtypes' bfloat16 is '<V2')."""

    def __init__(self, a, typestr: str):
        self.__cuda_array_interface__ = {"shape": tuple(a.shape), "typestr": typestr,
                                         "data": (a.ptr, False), "version": 3, "strides": None}


def mappable(name: str) -> dict[str, bool]:
    """Which peers have a mapping for op `name` (used by tests and notes)."""
    return {"torch": name in TORCH_MAP, "cupy": name in CUPY_MAP or name in CUPY_UNARY_EK or name in CUPY_BINARY_EK}


@dataclass
class Peer:
    """One peer library, loaded. `op(name, dtype, params)` returns (callable or None, why not)."""
    name: str
    mod: object
    _cache: dict = field(default_factory=dict)

    def wrap(self, a):
        raise NotImplementedError

    def op(self, name: str, dtype: str, params: dict):
        raise NotImplementedError

    def api(self, name: str):
        return None, f"{self.name} has no counterpart for {name}"

    def op_into(self, name: str, dtype: str, params: dict):
        """The op writing into a given array, `fn(*inputs, out=)`, or None where this peer has
        no such form (its op then allocates its result)."""
        return None

    def round_trip(self, fn):
        """fn on numpy inputs, numpy out: each input copied to the GPU, fn, the result copied back
        into a new numpy array (what a user of this library writes for numpy data)."""
        raise NotImplementedError

    def sync(self) -> None:
        """Wait for this library's queued GPU work."""

    def release(self) -> None:
        """Give cached device memory back, so the next dtype's buffers fit."""


class TorchPeer(Peer):
    def wrap(self, a):
        t = self.mod
        name = dt.lookup(a.dtype).name
        if name == "bfloat16":
            return t.as_tensor(_Interface(a, "<i2"), device="cuda").view(t.bfloat16)
        return t.as_tensor(_Interface(a, a.dtype.str), device="cuda")

    def op(self, name, dtype, params):
        build = TORCH_MAP.get(name)
        if build is None:
            return None, f"torch: no mapping for op {name!r} in pyew/bench/peers.py; pyew only"
        try:
            return build(self.mod, params), ""
        except (KeyError, AttributeError) as e:
            return None, f"torch: cannot build {name!r} ({type(e).__name__}: {e})"

    def op_into(self, name, dtype, params):
        build = TORCH_INTO.get(name)
        try:
            return None if build is None else build(self.mod, params)
        except (KeyError, AttributeError):       # op() says why, where the bench falls back to it
            return None

    def api(self, name):
        build = TORCH_API.get(name)
        if build is None:
            return None, f"torch: no counterpart for {name}"
        return build(self.mod), ""

    def to_numpy(self, r):
        t = self.mod
        r = r.cpu()
        if r.dtype == t.bfloat16:     # numpy has no bfloat16: the bits, seen as ml_dtypes' bfloat16
            import ml_dtypes
            return r.view(t.int16).numpy().view(ml_dtypes.bfloat16)
        return r.numpy()

    def round_trip(self, fn):
        t, to_numpy = self.mod, self.to_numpy
        return lambda *xs: to_numpy(fn(*[t.from_numpy(x).cuda() for x in xs]))

    def sync(self):
        self.mod.cuda.synchronize()

    def release(self):
        self.mod.cuda.synchronize()
        self.mod.cuda.empty_cache()


class CupyPeer(Peer):
    def wrap(self, a):
        name = dt.lookup(a.dtype).name
        if name == "bfloat16":
            raise TypeError("CuPy has no bfloat16 dtype")
        return self.mod.asarray(_Interface(a, a.dtype.str))

    def op(self, name, dtype, params):
        cp = self.mod
        if dtype == "bfloat16" or name == "to_bfloat16":
            return None, "CuPy: no bfloat16 dtype; CuPy columns empty for bfloat16"
        if name in CUPY_MAP:
            try:
                return CUPY_MAP[name](cp, params), ""
            except KeyError as e:
                return None, f"CuPy: cannot build {name!r} (missing param {e})"
        body = CUPY_UNARY_EK.get(name) or CUPY_BINARY_EK.get(name)
        if body is None:
            return None, f"CuPy: no mapping for op {name!r} in pyew/bench/peers.py; pyew only"
        key = (name, _COMPUTE[dtype], tuple(sorted(params.items())))
        k = self._cache.get(key)
        if k is None:
            try:
                code = body.format(**params)
            except KeyError as e:
                return None, f"CuPy: cannot build {name!r} (missing param {e})"
            typedef = f"typedef {_COMPUTE[dtype]} C; "
            if name in CUPY_UNARY_EK:
                k = cp.ElementwiseKernel("T x", "T y", typedef + "C v = (C)x; " + code, f"pyew_bench_{name}")
            else:
                k = cp.ElementwiseKernel("T x, T y", "T z", typedef + code, f"pyew_bench_{name}")
            self._cache[key] = k
        return k, ""

    def api(self, name):
        if name == "sigmoid":
            return self.op("sigmoid", "float32", {})
        if name == "add":
            return self.mod.add, ""
        return None, f"CuPy: no counterpart for {name}"

    def round_trip(self, fn):
        asarray = self.mod.asarray
        return lambda *xs: fn(*[asarray(x) for x in xs]).get()

    def sync(self):
        self.mod.cuda.Device().synchronize()

    def release(self):
        self.mod.cuda.Device().synchronize()
        self.mod.get_default_memory_pool().free_all_blocks()


class CpuPeer(Peer):
    """numpy or numexpr: numpy in, numpy out on the CPU (the numpy suite's columns). `threads` is
    how many threads it computes with."""
    threads: int = 1

    def wrap(self, a):
        raise TypeError(f"{self.name} runs on the CPU: it takes numpy arrays")

    def op(self, name, dtype, params):
        return None, f"{self.name} runs on the CPU: no column in GPU tables"


def _load_torch():
    import torch
    if not torch.cuda.is_available():
        raise RuntimeError("torch.cuda.is_available() is False")
    torch.cuda.init()
    return TorchPeer("torch", torch)


def _load_cupy():
    import cupy
    if cupy.cuda.runtime.getDeviceCount() < 1:
        raise RuntimeError("CuPy sees no GPU")
    cupy.cuda.Device(0).use()
    return CupyPeer("cupy", cupy)


def _load_numpy():
    import numpy
    return CpuPeer("numpy", numpy)


def _load_numexpr():
    import numexpr

    from .cpu_peers import numexpr_threads
    peer = CpuPeer("numexpr", numexpr)
    peer.threads = numexpr_threads(numexpr)
    return peer


LOADERS = {"torch": _load_torch, "cupy": _load_cupy, "numpy": _load_numpy, "numexpr": _load_numexpr}
GPU_PEERS = ("torch", "cupy")
CPU_PEERS = ("numpy", "numexpr")


def load(names, note) -> dict[str, Peer]:
    """Import each named peer; a failure is a note ('torch skipped: ...'), never an error."""
    peers = {}
    for name in names:
        loader = LOADERS.get(name)
        if loader is None:
            note(f"unknown peer {name!r} (known: {', '.join(LOADERS)}); skipped")
            continue
        try:
            peers[name] = loader()
        except Exception as e:   # ImportError, no GPU, a broken install: all mean "no column"
            note(f"{name} skipped: {type(e).__name__}: {e}".rstrip(": "))
    return peers
