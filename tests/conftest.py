"""Shared test setup: GPU detection (GPU tests skip with the reason where there is none) and
helpers to build fresh random inputs and compare against float64 references."""
from __future__ import annotations

import numpy as np
import pytest

import pyew
from pyew import dtypes as dt
from pyew.errors import LibraryError, NoDeviceError


def _gpu_reason() -> str | None:
    try:
        pyew.ops()
    except LibraryError as e:
        return f"libew.so not usable: {e}"
    try:
        pyew.device_info()
    except NoDeviceError as e:
        return f"no GPU: {e}"
    return None


GPU_SKIP_REASON = _gpu_reason()
needs_gpu = pytest.mark.skipif(GPU_SKIP_REASON is not None, reason=GPU_SKIP_REASON or "")


@pytest.fixture
def rng(request):
    # fresh data every run, but reproducible from the printed seed when a test fails
    seed = np.random.SeedSequence().entropy % (2**32)
    request.node.user_properties.append(("seed", seed))
    return np.random.default_rng(seed)


def random_array(rng, n, dtype: str, lo=-6.0, hi=6.0) -> np.ndarray:
    info = dt.BY_NAME[dtype]
    if info.kind == "int":
        return rng.integers(-1000, 1000, size=n).astype(info.np)
    return rng.uniform(lo, hi, size=n).astype(np.float64).astype(info.np)


def poison(a):
    """Fill a DeviceArray with NaN (floats) or a sentinel (ints) so unwritten elements show."""
    import ctypes
    info = dt.lookup(a.dtype)
    bits = {2: 0x7E00 if info.name == "float16" else 0x7FC0, 4: 0x7FC00000 if info.kind == "float" else 0x5A5A5A5A,
            8: 0x7FF8000000000000 if info.kind == "float" else 0x5A5A5A5A5A5A5A5A}[info.itemsize]
    if a.size:
        lib = pyew.library.get()
        d = pyew.runtime.device()
        lib.check(lib.fill(a.ptr, a.size, info.itemsize, bits, 0, d.sms, d.threads_per_sm), "ew_fill")
    return a


def header_compiles_as_c(gen_dir, main_expr: str) -> None:
    """Assert that the generated build/ew.h in gen_dir compiles as C in a main returning main_expr."""
    import subprocess
    from pathlib import Path
    src = Path(gen_dir) / "use.c"
    src.write_text(f'#include "ew.h"\nint main(void) {{ return {main_expr}; }}\n')
    libew = Path(__file__).resolve().parent.parent / "libew"
    r = subprocess.run(["gcc", "-fsyntax-only", "-I", str(gen_dir), "-I", str(libew), str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
