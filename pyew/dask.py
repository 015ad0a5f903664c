"""pyew ops on dask arrays: blockwise, on numpy chunks (through the transfer engine) and on CuPy
chunks (on their GPU, without a copy), on any Dask scheduler.

    import dask.array as da, pyew, pyew.dask as ed
    x = da.random.random((1 << 28,), chunks=1 << 24).astype("float32")
    y = ed.gelu(ed.add(ed.mul(x, 0.5), 0.1))                 # lazy dask arrays, like dask's ufuncs
    z = ed.map_blocks(lambda x: pyew.gelu(pyew.add(pyew.mul(x, 0.5), 0.1)), x)   # one upload per chunk

Every map op of the loaded library, and of spec files pyew.load_spec loaded, is a function here
(`pyew.dask.gelu`), and `map(op, *args)` takes an op or its name. A task that calls a loaded spec
file's op names the file, and a worker process that has not loaded it loads it (the path must be
readable there, as on one machine's cluster). They behave as dask's own ufuncs
do: numpy broadcasting between dask arrays, numpy arrays and scalars; the result dtype is pyew's
(numpy's promotion) and is known without running anything, so building a graph needs no GPU. Each
chunk keeps its array type: numpy chunks give numpy chunks, CuPy chunks give CuPy chunks (pyew's
work queues on CuPy's current stream, so CuPy code that follows is ordered after it).

`map_blocks(func, *args)` runs a function of DeviceArrays per chunk: numpy chunks go to the GPU
once, every op of `func` runs there, and the result comes back once, into page-locked memory from
pyew's pool while it has room (pyew.empty_pinned), so that copy is a single DMA. It runs any
function of DeviceArrays; a chain of the op functions fuses into one formula per chunk by itself.

On a cluster each worker's pyew uses its current GPU: dask-cuda's LocalCUDACluster gives every
worker its own GPU as device 0 (CUDA_VISIBLE_DEVICES), so nothing pyew-specific is configured.
"""
from __future__ import annotations

import functools
import sys

import numpy as np

try:
    import dask.array as da
    from dask.array.utils import meta_from_array
except ImportError as e:        # pragma: no cover - depends on the environment
    raise ImportError(f"pyew.dask needs dask ({e}): pip install 'pyew[dask]', or pip install 'dask[array]' "
                      "distributed") from e

from . import dtypes as dt
from . import formula, fused, jit, kinds, library, specs, transfer
from .array import DeviceArray
from .call import param_values
from .formula import Call, FormulaError, Var
from .interop import asarray
from .operands import HOST, SCALAR, Operand, op_dtype, python_number
from .pinned import pinned_or_empty
from .runtime import Device, ExternalStream

__all__ = ["map", "map_blocks", "evaluate"]


# ---- the op functions -----------------------------------------------------------------------------

def _op_named(name) -> library.Op | None:
    """The map op called `name`: the loaded library's, or one pyew.load_spec loaded."""
    op = fused.vocabulary().get(name) if isinstance(name, str) else None
    return op if op is not None and op.name == name else None      # not numpy's names for the ops


def _map_op(op) -> library.Op:
    """The map op for `op` (a pyew op function, a loaded spec op's function, or its name)."""
    name = op if isinstance(op, str) else getattr(op, "__name__", None)
    spec = _op_named(name)
    if spec is None or (not isinstance(op, str) and op is not kinds.table().get(name) and not specs.made_here(op)):
        shown = repr(op) if isinstance(op, str) else type(op).__name__
        raise TypeError(f"pyew.dask.map: {shown} is not a map op of the loaded library or of a spec file "
                        "pyew.load_spec loaded (pyew.ops() lists the library's; map_blocks runs any function "
                        "of DeviceArrays)")
    return spec


def _operand(a, name: str) -> Operand:
    if python_number(a):
        return Operand(name, SCALAR, a, None, ())
    npd = np.dtype(a.dtype)
    info = dt.lookup(npd)
    if isinstance(a, np.generic) or getattr(a, "ndim", 1) == 0:
        return Operand(name, SCALAR, np.zeros((), npd)[()], info, ())
    return Operand(name, HOST, np.zeros(1, npd), info, (1,))


def _result_dtype(op, *args) -> np.dtype:
    """The dtype pyew gives op(*args): numpy's promotion of the inputs, then the op's kernel."""
    spec = _map_op(op)
    if len(args) != len(spec.inputs):
        raise TypeError(f"{spec.name}() takes {len(spec.inputs)} input(s) ({', '.join(spec.inputs)}), got {len(args)}")
    try:
        operands = [_operand(a, n) for a, n in zip(args, spec.inputs)]
    except (KeyError, TypeError):
        bad = next(a for a in args if not isinstance(a, (bool, int, float)) and not _known(a))
        raise TypeError(f"{spec.name}: a {getattr(bad, 'dtype', type(bad).__name__)} input, which pyew does not "
                        "support") from None
    return spec.kernel(op_dtype(spec, operands)).out_dtype.np


def _known(a) -> bool:
    try:
        dt.lookup(np.dtype(a.dtype))
        return True
    except (KeyError, TypeError, AttributeError):
        return False


def map(op, *args, **params):
    """op(*args, **params) blockwise over dask arrays (numpy arrays and scalars broadcast in, as with
    dask's ufuncs). Returns a dask array; nothing runs until it is computed. Ops applied to the
    results of other pyew.dask ops fuse with them: each chunk runs the whole chain as one formula
    (one kernel, and for numpy chunks one upload and one download), up to MAX_FUSED_CALLS ops and
    the arrays one kernel takes (a longer chain runs as several formulas); a persisted result is
    read, not computed again."""
    spec = _map_op(op)
    param_values(spec, params)            # a missing, unknown or mistyped param fails now, not per chunk
    arrays = [a if _is_scalar(a) else da.asarray(a) for a in args]
    dtype = _result_dtype(spec.name, *arrays)
    if not any(not _is_scalar(a) for a in arrays):
        raise TypeError(f"pyew.dask.{spec.name}: give at least one array (for scalars call pyew.{spec.name})")
    params = tuple(sorted((k, v.item() if isinstance(v, np.generic) else v) for k, v in params.items()))
    nodes, leaves = _operands(arrays, lambda nodes: Call(spec.name, tuple(nodes), params))
    return _formula_array(Call(spec.name, tuple(nodes), params), leaves, dtype, spec.name)


def evaluate(expr: str, local_dict: dict | None = None, global_dict: dict | None = None):
    """pyew.evaluate over dask arrays: the formula blockwise, one fused kernel per chunk (numpy chunks
    cross PCIe once each way). Names come from local_dict, global_dict, or the caller's frame, as
    pyew.evaluate takes them; dask arrays, numpy arrays and numbers mix as with dask's ufuncs."""
    tree, names = fused.parse(expr)
    values = fused.lookup_names(expr, names, local_dict, global_dict, sys._getframe(1))
    arrays = {k: (v if _is_scalar(v) else da.asarray(v)) for k, v in values.items()}
    if all(_is_scalar(v) for v in arrays.values()):
        raise TypeError("pyew.dask.evaluate: give at least one array")
    try:
        return _evaluate(tree, arrays, expr)
    except RecursionError:
        raise FormulaError(f"pyew.dask.evaluate: formula nests too deeply to compile ({len(expr)} characters); "
                           "split it into smaller formulas") from None


def _evaluate(tree, arrays: dict, expr: str):
    keys = list(arrays)
    nodes, leaves = _operands([arrays[k] for k in keys],
                              lambda nodes: formula.substitute(tree, dict(zip(keys, nodes))))
    tree = formula.substitute(tree, dict(zip(keys, nodes)))
    args = []
    for n, v in leaves:
        if python_number(v):
            args.append(fused.Arg(n, False, None, type(v)))
            continue
        try:
            info = dt.lookup(np.dtype(v.dtype))
        except (KeyError, TypeError):
            shown = next(k for k in keys if arrays[k] is v) if any(arrays[k] is v for k in keys) else n
            raise TypeError(f"pyew.dask.evaluate: {shown!r} is {np.dtype(v.dtype)}, which pyew does not support") \
                from None
        args.append(fused.Arg(n, not _is_scalar(v), info))
    dtype = fused.program(tree, tuple(args), expr).out.np
    return _formula_array(tree, leaves, dtype, expr.strip())


# A pyew.dask result carries (its tree, its leaves, its calls, its graph layer, the definitions of
# its loaded ops) as the attribute FORMULA, for fusing: a later op on it runs its formula too,
# unless the array was persisted since (its layer is then another) or its formula has grown to
# MAX_FUSED_CALLS ops: a chain built in a loop fuses in pieces of that many, each compiled once,
# rather than into one ever longer kernel. Held by the result itself, the leaves go with it.
FORMULA = "_pyew_formula"
MAX_FUSED_CALLS = 64


def formula_of(a):
    """What a pyew.dask result carries for fusing (see FORMULA), or None."""
    return getattr(a, FORMULA, None) if isinstance(a, da.Array) else None


def _operands(args: list, build) -> tuple[list, list]:
    """(nodes, leaves) of a new formula's operands, pyew.dask results inlined; where that would
    take more arrays than a fused kernel does (jit.MAX_ARRAYS), none is inlined. `build(nodes)`
    gives the new tree (for its array count)."""
    leaves: list = []
    nodes = [_inline(a, leaves) for a in args]
    if _array_count(leaves) > jit.MAX_ARRAYS:
        leaves = []
        nodes = [_leaf(a, leaves) for a in args]
        if _array_count(leaves) > jit.MAX_ARRAYS:
            raise FormulaError(f"formula {formula.text(build(nodes))!r} has {_array_count(leaves)} array operands; "
                               f"a fused kernel takes at most {jit.MAX_ARRAYS}: split it into formulas of fewer "
                               "arrays")
    return nodes, leaves


def _array_count(leaves: list) -> int:
    return sum(not _is_scalar(v) for _, v in leaves)


def _inline(a, leaves: list):
    """The node of one operand: a pyew.dask result's own formula (its leaves joining `leaves`), or a
    new variable for anything else."""
    hit = formula_of(a)
    if hit is not None:
        tree, sub, count, layer, defs = hit
        # (a loaded op redefined since: the array keeps its own graph, computed with the definition it had)
        if count < MAX_FUSED_CALLS and a.dask.layers.get(a.name) is layer and \
                (not defs or specs.definitions({c.op for c in formula.calls(tree)}) == defs):
            mapping = {}
            for name, v in sub:
                mapping[name] = _leaf(v, leaves)
            return formula.substitute(tree, mapping)
    return _leaf(a, leaves)


def _leaf(v, leaves: list) -> Var:
    for name, have in leaves:
        if have is v:
            return Var(name)
    name = f"v{len(leaves)}"
    leaves.append((name, v))
    return Var(name)


def _formula_array(tree, leaves: list, dtype: np.dtype, what: str):
    arrays = [v for _, v in leaves]
    dims = [a.ndim for a in arrays if not _is_scalar(a)]
    ndim = max(dims)
    # CuPy chunks anywhere make CuPy chunks (_apply_formula allocates the output with CuPy)
    like = next((a for a in arrays if not _is_scalar(a) and _is_cupy(a._meta)), None)
    if like is None:
        like = next(a for a in arrays if not _is_scalar(a))
    meta = meta_from_array(like._meta, ndim=ndim, dtype=dtype)
    pairs = []
    for a in arrays:
        pairs += [a, None] if _is_scalar(a) else [a, tuple(range(ndim - a.ndim, ndim))]
    names = tuple(n for n, _ in leaves)
    text = formula.text(tree)
    # the loaded ops' definitions: a worker process loads them, and another definition is another graph
    defs = specs.definitions({c.op for c in formula.calls(tree)})
    which = sorted(pair for _, group in defs for pair in group)       # the name: what, not where from
    out = da.blockwise(functools.partial(_apply_formula, tree, names, text, dtype, defs), tuple(range(ndim)), *pairs,
                       dtype=dtype, meta=meta, name=f"pyew-{what}-{da.core.tokenize(text, which, *arrays)}")
    setattr(out, FORMULA, (tree, leaves, len(formula.calls(tree)), out.dask.layers.get(out.name), defs))
    return out


def _is_scalar(a) -> bool:
    return isinstance(a, (bool, int, float, np.generic)) or (isinstance(a, np.ndarray) and a.ndim == 0)


def _apply_formula(tree, names: tuple, text: str, dtype: np.dtype, defs: tuple, *blocks):
    if not defs:
        return _run_formula(tree, names, text, dtype, blocks)
    with specs.using(defs):     # a worker process loads the spec files whose ops the formula calls
        return _run_formula(tree, names, text, dtype, blocks)


def _run_formula(tree, names: tuple, text: str, dtype: np.dtype, blocks):
    gpu = _gpu_block(blocks)
    if gpu is not None:         # CuPy chunks on another GPU than the first's: copied there, as map_blocks does
        index = gpu.device.id
        blocks = tuple(asarray(b, device=index) if _is_cupy(b) and b.device.id != index else b for b in blocks)
    values = dict(zip(names, blocks))
    shape = np.broadcast_shapes(*(np.shape(b) for b in blocks))
    fn = kinds.table().get(tree.op) if isinstance(tree, Call) else None
    if fn is not None and all(isinstance(a, Var) for a in tree.args):
        # one op of the library: its own kernel, nothing to compile
        args = [values[a.name] for a in tree.args]
        if gpu is None:
            return fn(*args, **dict(tree.params))
        out, stream = _empty_like(gpu, shape, dtype)
        fn(*args, out=out, stream=stream, **dict(tree.params))
        return out
    if gpu is None:                      # numpy in, numpy out: into pinned memory while the pool has room
        out = pinned_or_empty(shape, dtype)
        if _uploaded_whole(values.values(), out):
            # a chunk the transfer engine would stream: up once, the formula, down by one DMA, as
            # map_blocks does; in a worker, its other threads take the GIL from a streamed
            # formula's block loop far more than from these few copies (docs/tuning.md)
            values = {k: (asarray(v) if isinstance(v, np.ndarray) and v.ndim else v) for k, v in values.items()}
            return fused.run(tree, values, text).get(out=out)
        return fused.run(tree, values, text, out=out)
    out, stream = _empty_like(gpu, shape, dtype)
    fused.run(tree, values, text, out=out, stream=stream)
    return out


def _uploaded_whole(values, out: np.ndarray) -> bool:
    """Whether a numpy chunk's formula goes up whole (pyew.asarray) rather than through the transfer
    engine: where the engine would stream it (transfer.fits_one_shot) and its operands fit the
    device memory one streamed call may use (device_bytes)."""
    arrays = [v for v in values if isinstance(v, np.ndarray)] + [out]
    moved = sum(a.nbytes for a in arrays)
    return moved <= transfer.transfer_limits()["device_bytes"] and not transfer.fits_one_shot(arrays)


def _gpu_block(blocks):
    """The first chunk that lives on a GPU (a CuPy array), or None if all are host data."""
    for b in blocks:
        if _is_cupy(b):
            return b
    return None


def _empty_like(gpu, shape, dtype):
    """A new CuPy array on gpu's device, and a pyew stream for CuPy's current stream there."""
    cupy = sys.modules["cupy"]
    with cupy.cuda.Device(gpu.device.id):
        out = cupy.empty(shape, dtype)
        stream = ExternalStream(cupy.cuda.get_current_stream(), Device(gpu.device.id))
    return out, stream


# ---- functions of DeviceArrays per chunk -----------------------------------------------------------

def map_blocks(func, *args, dtype=None, chunks=None, drop_axis=None, new_axis=None, **kwargs):
    """func(*blocks, **kwargs) per chunk, with each array chunk given to func as a DeviceArray on
    the worker's GPU: numpy chunks are copied up once, CuPy chunks are used in place. func runs
    pyew ops (or anything that takes DeviceArrays) and returns a DeviceArray, which comes back as
    numpy for numpy chunks, or CuPy for CuPy chunks. dtype defaults to the first array's; chunks,
    drop_axis and new_axis are dask.array.map_blocks's."""
    arrays = [a for a in args if isinstance(a, da.Array)]
    if not arrays:
        raise TypeError("pyew.dask.map_blocks: give at least one dask array")
    if any(isinstance(a._meta, np.ma.MaskedArray) for a in arrays):
        raise TypeError("pyew.dask.map_blocks: masked chunks, and pyew has no masks (their masked values would be "
                        "computed as data): map a.map_blocks(np.ma.filled) first")
    like = arrays[0]
    dtype = np.dtype(like.dtype if dtype is None else dtype)
    ndim = like.ndim - len(_axes(drop_axis)) + len(_axes(new_axis))
    # CuPy chunks anywhere make CuPy results (_apply_func)
    meta = meta_from_array(next((a for a in arrays if _is_cupy(a._meta)), like)._meta, ndim=ndim, dtype=dtype)
    extra = {k: v for k, v in (("chunks", chunks), ("drop_axis", drop_axis), ("new_axis", new_axis))
             if v is not None}
    # the name covers all that shapes the result, as dask.array.map_blocks's does
    token = da.core.tokenize(_func_token(func), *args, kwargs, dtype, extra)
    return da.map_blocks(functools.partial(_apply_func, func, dtype), *args, dtype=dtype, meta=meta,
                         name=f"pyew-{getattr(func, '__name__', 'func')}-{token}", **extra, **kwargs)


def _func_token(func):
    """What names func in a graph: itself where it pickles by reference (a module's function),
    else the object's identity (a lambda or a closure: tokenizing it would pickle what it
    captures, GPU arrays copied to the host among them). The graph holds func, so no other
    object takes that identity while the graph lives."""
    name = getattr(func, "__qualname__", "")
    if getattr(func, "__closure__", None) or "<lambda>" in name or "<locals>" in name:
        return ("callable", id(func), name)
    return func


def _axes(axes) -> tuple:
    """drop_axis or new_axis as a tuple (None, an int, or ints)."""
    if axes is None:
        return ()
    return (axes,) if isinstance(axes, int) else tuple(axes)


def _apply_func(func, dtype: np.dtype, *blocks, **kwargs):
    gpu = _gpu_block(blocks)
    if gpu is None:
        ins = [asarray(b) if isinstance(b, np.ndarray) else b for b in blocks]
        res = _checked(func(*ins, **kwargs), func, dtype)
        # in pinned memory while the pool has room: the copy down is one DMA, with no host copy
        # and no page faults of a new array
        return res.get(out=pinned_or_empty(res.shape, res.dtype))
    cupy = sys.modules["cupy"]
    index = gpu.device.id
    with cupy.cuda.Device(index):
        # func's ops queue on CuPy's current stream, and CuPy takes the result through DLPack
        # without a copy: what CuPy does next with it is ordered after them, with no host wait
        with ExternalStream(cupy.cuda.get_current_stream(), index):
            ins = [asarray(b, device=index) if isinstance(b, np.ndarray) or b is gpu or _is_cupy(b) else b
                   for b in blocks]
            res = _checked(func(*ins, **kwargs), func, dtype)
        return cupy.from_dlpack(res)


def _is_cupy(b) -> bool:
    return type(b).__module__.split(".")[0] == "cupy"


def _checked(res, func, dtype: np.dtype) -> DeviceArray:
    if not isinstance(res, DeviceArray):
        raise TypeError(f"pyew.dask.map_blocks: {getattr(func, '__name__', 'func')} returned a "
                        f"{type(res).__name__}; it must return a pyew DeviceArray")
    if res.dtype != dtype:
        raise TypeError(f"pyew.dask.map_blocks: {getattr(func, '__name__', 'func')} returned {res.dtype}, but the "
                        f"dask array was declared {dtype}: pass dtype={res.dtype.name!r}")
    return res


def __getattr__(name: str):
    if name.startswith("_"):
        raise AttributeError(name)
    spec = _op_named(name)
    if spec is None:
        raise AttributeError(f"module 'pyew.dask' has no attribute {name!r} (not a map op of the loaded library "
                             "or of a spec file pyew.load_spec loaded; see pyew.ops())")
    fn = functools.partial(map, name)
    fn.__name__ = fn.__qualname__ = name           # type: ignore[attr-defined]
    fn.__doc__ = f"pyew.{name} blockwise over dask arrays. {spec.doc}"
    globals()[name] = fn
    return fn
