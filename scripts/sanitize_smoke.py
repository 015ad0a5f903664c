"""A small run of every map kernel of the library, meant to be run under compute-sanitizer on a GPU
machine (any out-of-bounds access or uninitialised read is reported there):
    compute-sanitizer --tool memcheck python3 scripts/sanitize_smoke.py
It covers odd sizes, views at every offset (equal and different misalignments), broadcast layouts
(the strided entry: row and channel bias, scalars, outer products, strided views), mixed dtypes
converted on the GPU, and numpy calls streamed through the transfer engine in many blocks.
PYEW_SANITIZE_OPS=add,gelu limits the map ops to those (the sanitizer makes every launch slow)."""
import os

import numpy as np

import pyew

rng = np.random.default_rng(1)
count = 0


def data(dt, n):
    return (rng.integers(-50, 50, n) if dt.kind == "int" else rng.standard_normal(n)).astype(dt.np)


def exact(a, off):
    """A device view `off` elements into a buffer sized exactly for it: nothing follows it."""
    pad = np.concatenate([np.zeros(off, a.dtype), a]) if off else a
    return pyew.asarray(pad)[off:]


only = set(filter(None, os.environ.get("PYEW_SANITIZE_OPS", "").split(",")))
for op in pyew.library.get().manifest.ops:
    if op.kind != "map" or only and op.name not in only:
        continue
    fn = getattr(pyew, op.name)
    params = {p.name: (p.default if p.default is not None else 1.5) for p in op.params}
    for k in op.kernels:
        dt = k.dtype
        for n in (1, 7, 33, 4099):
            for shift in (0, 1, 3, 5):
                same = shift % 2 == 1
                arrays = [exact(data(dt, n), shift if same else (j + shift) % 8) for j in range(len(op.inputs))]
                off = shift if same else (shift + 2) % 8
                out = exact(np.zeros(n, k.out_dtype.np), off)
                fn(*arrays, out=out, **params)
                count += 1
        if len(op.inputs) == 2 and dt.kind == "float":
            for sa, sb in (((33, 17), (17,)), ((5, 7, 9), (7, 1)), ((31,), ()), ((6, 1), (1, 5)),
                           ((2, 3, 4, 5), (3, 1, 5))):
                a = pyew.asarray(data(dt, int(np.prod(sa))).reshape(sa))
                b = pyew.asarray(data(dt, int(np.prod(sb))).reshape(sb)) if sb else 1.5
                fn(a, b, **params)
                fn(b, a, **params)
                count += 2
tlim = pyew.set_transfer_limits(small_bytes=0, device_bytes=256 * 1024, threads=4)
x = rng.standard_normal((257, 1001)).astype(np.float32)
for arrays in ((x,), (x, x[:, :1]), (x[:, ::2],), (x.astype(np.float16), x)):
    pyew.add(*arrays, 1.0) if len(arrays) == 1 else pyew.add(*arrays)
    count += 1
pyew.relu_mask(x)
pyew.set_transfer_limits(**tlim)
# fused formulas: each launch variant of the run-time compiled kernels (aligned, peeled prologue,
# straddling loads with the shift fixed and read at run time, half packs, broadcasts), odd sizes
for f, dtypes in (("sigmoid(a) * 2", ("float32", "float16", "float64")), ("a * b + 1", ("float32", "bfloat16")),
                  ("where(a > b, exp(a), b * 0.5)", ("float32", "float16"))):
    for name in dtypes:
        info = pyew.dtypes.BY_NAME[name]
        for n in (1, 7, 33, 4099):
            for sa, sb in ((0, 0), (1, 1), (1, 0), (2, 0), (3, 5), (0, 6)):
                env = {"a": exact(data(info, n), sa), "b": exact(data(info, n), sb)}
                pyew.evaluate(f, local_dict=env, out=exact(np.zeros(n, info.np), 0))
                count += 1
        a = pyew.asarray(data(info, 33 * 17).reshape(33, 17))
        for b in (pyew.asarray(data(info, 17)), pyew.asarray(data(info, 33).reshape(33, 1))):
            pyew.evaluate(f, local_dict={"a": a, "b": b})
            count += 1
pyew.synchronize()
print(f"sanitize smoke: {count} calls done")
