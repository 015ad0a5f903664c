"""The libraries pyew is compared with (one that does not import, or sees no GPU, is skipped with a
note). Each op's counterpart is derived from its name and spec (the numpy `ref`, a cast's `out`), so an
op added to the spec joins every comparison; the tables hold what torch and numexpr spell otherwise."""
from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import os

import numpy as np

from .. import dtypes as dt

# pyew -> (torch, kwargs)
TORCH_NAMES = {"gelu_tanh": ("gelu", {"approximate": "tanh"}), "scale": ("mul", {}), "equal": ("eq", {}),
               "invert": ("bitwise_not", {}), "power": ("pow", {}), "rint": ("round", {}),
               "left_shift": ("bitwise_left_shift", {}), "right_shift": ("bitwise_right_shift", {})}
# no one torch function: what a torch user writes (two kernels), and the form writing into out (relu: clamp_min's)
TORCH_CALLS = {
    "add_relu": (lambda t: lambda x, y: t.relu(x + y), lambda t: lambda x, y, out: t.relu_(t.add(x, y, out=out))),
    "relu": (lambda t: t.relu, lambda t: lambda x, out: t.clamp_min(x, 0, out=out)),
}
NUMEXPR_AS = {"maximum": "where({0} >= {1}, {0}, {1})", "minimum": "where({0} <= {1}, {0}, {1})",
              "sigmoid": "1 / (1 + exp(-({0})))", "absolute": "abs({0})", "square": "({0}) * ({0})",
              "negative": "-({0})", "positive": "({0}) + 0", "logical_not": "~({0})", "exp2": "exp({0} * log(2))",
              **{f: f"({{0}}) {o} ({{1}})" for f, o in (("greater", ">"), ("greater_equal", ">="), ("less", "<"),
                 ("less_equal", "<="), ("equal", "=="), ("not_equal", "!="), ("logical_and", "&"),
                 ("logical_or", "|"), ("logical_xor", "^"))}}


def is_cast(op) -> bool:
    """A cast: its reference is its input, or it is named for its output dtype (to_int32, whose
    reference spells out its saturation, against a peer's plain conversion)."""
    return bool(op.out) and (op.ref.strip() == op.inputs[0] or op.name == f"to_{op.out}")


class _Weak:
    """Through this view np.sqrt(2) and the like stay Python numbers: weakly typed, they don't promote float32."""

    def __init__(self, xp):
        self.xp = xp

    def __getattr__(self, name):
        f, uf = getattr(self.xp, name), getattr(np, name, None)
        if not isinstance(uf, np.ufunc):
            return f

        def call(*args, **kw):
            if args and not kw and all(type(a) in (int, float) for a in args):
                r = uf(*args)
                return r.item() if isinstance(r, np.generic) else r
            return f(*args, **kw)
        return call


def ref_function(op, params: dict, xp, special: str):
    """The op's `ref` over its inputs on module xp (numpy or CuPy) in their dtype; erf/erfc from `special` if used.
    Only a spec's `ref` (trusted like the spec's C++) is compiled here; formulas from users never are
    (pyew/formula.py parses them against an allow-list)."""
    code = compile(op.ref, f"<ref of {op.name}>", "eval")
    scope = {"np": _Weak(xp), "sigmoid": lambda v: 1 / (1 + xp.exp(-v)), **params}
    if {"erf", "erfc"} & set(code.co_names):
        scope |= {f: getattr(importlib.import_module(special), f) for f in ("erf", "erfc")}
    return lambda *xs: eval(code, scope | dict(zip(op.inputs, xs)))


class Peer:
    """One library, loaded. op(case) -> (callable over the peer's arrays, or None; why not)."""
    gpu, threads = True, 1

    def __init__(self, name: str, mod):
        self.name, self.mod, self.cache = name, mod, {}

    def op(self, case):
        key = ("op", case.name, case.dtype)
        if key not in self.cache:
            try:
                self.cache[key] = self.build(case)
            except Exception as e:      # a ref this peer cannot take: no column, and why
                self.cache[key] = None, f"{self.name}: cannot build {case.label} ({type(e).__name__}: {e})"
        return self.cache[key]

    def into(self, case):
        """fn(*inputs, out=) into pyew's buffer (placement moves speeds near the copy ceiling), or None."""

    def round_trip(self, fn):
        """fn on numpy inputs, numpy out, as a user of this library writes it for numpy data."""
        return fn

    def release(self) -> None:
        """Give cached device memory back."""


class _CAI:
    """A bare __cuda_array_interface__ over a DeviceArray (another typestr: bfloat16 as int16)."""

    def __init__(self, a, typestr=None):
        self.__cuda_array_interface__ = {"shape": tuple(a.shape), "data": (a.ptr, False), "version": 3,
                                         "typestr": typestr or a.dtype.str, "strides": None}


class TorchPeer(Peer):
    def wrap(self, a):
        if dt.lookup(a.dtype).name == "bfloat16":        # numpy has no bfloat16: torch reinterprets int16
            return self.mod.as_tensor(_CAI(a, "<i2"), device="cuda").view(self.mod.bfloat16)
        return self.mod.as_tensor(_CAI(a), device="cuda")

    def find(self, path: str):
        f = functools.reduce(lambda o, part: getattr(o, part, None), path.split("."), self.mod)
        return f if callable(f) else None

    def build(self, case):
        t, op = self.mod, case.op
        if is_cast(op):
            return (lambda x: x.to(getattr(t, case.out_dtype))), ""
        if op.name in TORCH_CALLS:
            return TORCH_CALLS[op.name][0](t), ""
        (name, kw), args = TORCH_NAMES.get(op.name, (op.name, {})), tuple(case.params.values())
        f = next(filter(None, map(self.find, (name, f"special.{name}", f"nn.functional.{name}"))), None)
        if f is None:
            return None, (f"torch: no torch.{name}, torch.special.{name} or torch.nn.functional.{name} for op "
                          f"{op.name} (TORCH_NAMES in pyew/bench/peers.py maps names torch spells otherwise)")
        return (lambda *xs: f(*xs, *args, **kw)), ""

    def into(self, case):
        """The first of torch._C._nn.<name>, torch.<name>, torch.ops.aten.<name>.out to take out= on a probe."""
        key = ("into", case.name, case.dtype)
        if key in self.cache:
            return self.cache[key]
        t, op, fn = self.mod, case.op, None
        if is_cast(op):
            fn = lambda x, out: out.copy_(x)     # noqa: E731
        elif op.name in TORCH_CALLS:
            fn = TORCH_CALLS[op.name][1](t)
        else:
            (name, kw), args = TORCH_NAMES.get(op.name, (op.name, {})), tuple(case.params.values())
            for f in filter(None, map(self.find, (f"_C._nn.{name}", name, f"ops.aten.{name}.out"))):
                with contextlib.suppress(Exception):        # no out= form: the next one
                    f(*[t.ones(1, dtype=getattr(t, case.dtype), device="cuda")] * case.arity, *args, **kw,
                      out=t.empty(1, dtype=getattr(t, case.out_dtype), device="cuda"))
                    fn = lambda *xs, out, f=f: f(*xs, *args, **kw, out=out)     # noqa: E731
                    break
        self.cache[key] = fn
        return fn

    def round_trip(self, fn):                  # the numpy suite's dtypes: torch and numpy share them
        return lambda *xs: fn(*[self.mod.from_numpy(x).cuda() for x in xs]).cpu().numpy()

    def release(self):
        self.mod.cuda.synchronize()
        self.mod.cuda.empty_cache()


class CupyPeer(Peer):
    def wrap(self, a):
        if dt.lookup(a.dtype).name == "bfloat16":
            raise TypeError("CuPy has no bfloat16 dtype")
        return self.mod.asarray(_CAI(a))

    def build(self, case):
        if "bfloat16" in (case.dtype, case.out_dtype):
            return None, "CuPy: no bfloat16 dtype; CuPy columns empty for bfloat16"
        if is_cast(case.op):
            return (lambda x: x.astype(case.out_dtype)), ""
        f, out = ref_function(case.op, case.params, self.mod, "cupyx.scipy.special"), case.out_dtype
        return self.mod.fuse(kernel_name=f"pyew_bench_{case.name}")(lambda *xs: f(*xs).astype(out)), ""

    def round_trip(self, fn):
        return lambda *xs: fn(*map(self.mod.asarray, xs)).get()

    def release(self):
        self.mod.cuda.Device().synchronize()
        self.mod.get_default_memory_pool().free_all_blocks()


class NumpyPeer(Peer):
    gpu = False

    def build(self, case):
        try:
            f, out = ref_function(case.op, case.params, np, "scipy.special"), dt.BY_NAME[case.out_dtype].np
        except ImportError:
            return None, f"numpy: {case.name}'s ref needs erf/erfc and scipy is not installed; no numpy column"

        def run(*xs):
            with np.errstate(all="ignore"):
                r = np.asarray(f(*xs))
            # a ref that is an input ("x") still makes a new array, as the op does
            return r.astype(out) if r.dtype != out or any(np.shares_memory(r, x) for x in xs) else r
        return run, ""


class _ToNumexpr(ast.NodeTransformer):
    """np.f(...) -> f(...), NUMEXPR_AS's rewrites, each number a named scalar (of the inputs' dtype: no promotion)."""

    def __init__(self):
        self.consts = {}

    def visit_Constant(self, node):
        if type(node.value) not in (int, float):
            return node
        self.consts[f"k{len(self.consts)}"] = node.value
        return ast.Name(f"k{len(self.consts) - 1}", ast.Load())

    def visit_Call(self, node):
        self.generic_visit(node)
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        if name in NUMEXPR_AS:
            return self.visit(ast.parse(NUMEXPR_AS[name].format(*map(ast.unparse, node.args)), mode="eval").body)
        return ast.Call(ast.Name(name, ast.Load()), node.args, [])


class NumexprPeer(Peer):
    gpu, threads = False, property(lambda self: self.mod.get_num_threads())

    def build(self, case):
        if is_cast(case.op) or case.dtype not in ("float32", "float64"):
            return None, f"numexpr: no column for {case.label} (numexpr has no casts and no 16-bit floats)"
        tree = _ToNumexpr()
        expr = ast.unparse(tree.visit(ast.parse(case.op.ref, mode="eval")))
        scalars = {k: np.dtype(case.dtype).type(v) for k, v in (tree.consts | case.params).items()}
        names, evaluate = tuple(case.op.inputs), self.mod.evaluate
        run = lambda *xs: evaluate(expr, local_dict=scalars | dict(zip(names, xs)))     # noqa: E731
        got = run(*[np.ones(1, d) for d in case.ins]).dtype        # numexpr says here what it cannot do
        return (run, "") if got == np.dtype(case.out_dtype) else (None, f"numexpr: {case.label} gives {got}")


def _gpu(name):
    mod = __import__(name)
    if not (mod.cuda.is_available() if name == "torch" else mod.cuda.runtime.getDeviceCount() > 0):
        raise RuntimeError(f"{name} sees no GPU")
    return mod


def _numexpr():
    import numexpr
    numexpr.set_num_threads(max(1, min(os.cpu_count() or 1, numexpr.MAX_THREADS)))     # one thread per CPU
    return NumexprPeer("numexpr", numexpr)


LOADERS = {"torch": lambda: TorchPeer("torch", _gpu("torch")), "cupy": lambda: CupyPeer("cupy", _gpu("cupy")),
           "numpy": lambda: NumpyPeer("numpy", np), "numexpr": _numexpr}


def load(names, note) -> dict[str, Peer]:
    """Import each named peer; a failure is a note ('torch skipped: ...'), never an error."""
    peers = {}
    for name in names:
        if name not in LOADERS:
            note(f"unknown peer {name!r} (known: {', '.join(LOADERS)}); skipped")
            continue
        try:
            peers[name] = LOADERS[name]()
        except Exception as e:   # ImportError, no GPU, a broken install: all mean "no column"
            note(f"{name} skipped: {type(e).__name__}: {e}".rstrip(": "))
    return peers
