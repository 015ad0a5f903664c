"""Helpers shared by the test modules: random inputs, poisoned outputs, the op table's map
kernels for parametrization, and the C compile check of the generated header."""
from __future__ import annotations

import contextlib
import ctypes
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest

from pyew import dtypes as dt

ROOT = Path(__file__).resolve().parent.parent
# Params used in tests: the default where there is one, else a value that exercises the op.
TEST_PARAM = {"float": 1.75, "int": 3}


def random_array(rng, n, dtype: str, lo=-6.0, hi=6.0) -> np.ndarray:
    info = dt.BY_NAME[dtype]
    if info.kind == "bool":
        return rng.integers(0, 2, size=n).astype(bool)
    if info.kind == "int":
        return rng.integers(-1000, 1000, size=n).astype(info.np)
    return rng.uniform(lo, hi, size=n).astype(np.float64).astype(info.np)


def covered(ranges, a) -> bool:
    """Whether one of the (address, bytes) `ranges` holds all of array a's bytes."""
    return any(p <= a.ctypes.data and a.ctypes.data + a.nbytes <= p + n for p, n in ranges)


def poison(a):
    """Fill a DeviceArray with NaN (floats) or a sentinel (ints; the byte 0x5A, neither 0 nor 1, for
    bools) so unwritten elements show."""
    import pyew
    info = dt.lookup(a.dtype)
    bits = {1: 0x5A, 2: 0x7E00 if info.name == "float16" else 0x7FC0,
            4: 0x7FC00000 if info.kind == "float" else 0x5A5A5A5A,
            8: 0x7FF8000000000000 if info.kind == "float" else 0x5A5A5A5A5A5A5A5A}[info.itemsize]
    if a.size:
        rt = pyew.runtime
        with rt.on(a.device.id):
            pyew.call.fill(a.ptr, a.size, info, bits, rt.default_stream(a.device.id))
    return a


def manifest_ops(kind: str | None = None):
    """The loaded library's ops (of one kind), or [] where the library does not load: the GPU
    tests built from them then simply have no cases there."""
    import pyew
    try:
        ops = pyew.library.get().manifest.ops
    except pyew.LibraryError:
        return []
    return [o for o in ops if kind is None or o.kind == kind]


def map_kernels(pred=lambda op, k: True):
    """pytest params (op, kernel) for every map op x dtype of the library that pred accepts."""
    return [pytest.param(op, k, id=f"{op.name}-{k.dtype.name}")
            for op in manifest_ops("map") for k in op.kernels if pred(op, k)]


def params_of(op) -> dict:
    return {p.name: (p.default if p.default is not None else TEST_PARAM[p.type]) for p in op.params}


def header_compiles_as_c(gen_dir, main_expr: str) -> None:
    """Assert that the generated build/ew.h in gen_dir compiles as C in a main returning main_expr."""
    src = Path(gen_dir) / "use.c"
    src.write_text(f'#include "ew.h"\nint main(void) {{ return {main_expr}; }}\n')
    r = subprocess.run(["gcc", "-fsyntax-only", "-I", str(gen_dir), "-I", str(ROOT / "libew"), str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def run_in_threads(fn, n: int) -> None:
    """fn(0) .. fn(n - 1), each on its own thread, all started before any is joined."""
    threads = [threading.Thread(target=fn, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


@contextlib.contextmanager
def busy_torch_stream(torch, n: int, sleep_cycles: int):
    """A torch side stream kept busy for `sleep_cycles`, then filling a new tensor of n float32
    with 3.0; yields (stream, tensor) inside `torch.cuda.stream(stream)`, before that work is done."""
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x = torch.empty(n, device="cuda")
        torch.cuda._sleep(sleep_cycles)
        x.fill_(3.0)
        yield side, x


def filled(n, dtype: str, value):
    """A DeviceArray of n elements of dtype, each `value`, filled on the GPU (no host copy of a
    large array)."""
    import pyew
    a = pyew.empty(n, dtype)
    info = dt.BY_NAME[dtype]
    bits = int(np.array(value, info.np).view(f"u{info.itemsize}"))
    pyew.call.fill(a.ptr, n, info, bits, pyew.runtime.DEFAULT_STREAM)
    return a


def free_memory_for(nbytes: int) -> None:
    """Skip the test unless the GPU has nbytes free (and 1 GiB more) once the pool is trimmed."""
    import pyew
    pyew.synchronize()
    pyew.runtime.trim_pool()
    if pyew.device_info()["free_memory"] < nbytes + (1 << 30):
        pytest.skip(f"not enough GPU memory for {nbytes >> 30} GiB")


def shared_library(tmp_path_factory, name: str, source: str, include: Path | None = None) -> ctypes.CDLL:
    """C source compiled with the system's cc into a shared library and loaded (skips without cc)."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp(name)
    (d / f"{name}.c").write_text(source)
    so = d / f"{name}.so"
    flags = ["-I", str(include)] if include is not None else []
    subprocess.run(["cc", "-shared", "-fPIC", *flags, "-o", str(so), str(d / f"{name}.c")], check=True)
    return ctypes.CDLL(str(so))
