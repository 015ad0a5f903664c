"""pyew.load_spec on the GPU: the example spec file's ops (examples/my_ops.toml), compiled at run
time, against their float64 references: every dtype, params, tails and n = 0, misaligned views,
a broadcast, numpy in and out, out= (poisoned first), formulas using them, and a new process
reading their kernels from the disk cache."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pyew
from pyew import dtypes as dt

from .helpers import ROOT, poison
from .test_fused_gpu import check, inputs, parsed

pytestmark = pytest.mark.gpu
pytest.importorskip("mako", reason="mako (the generator's template engine) is not installed")

SPEC = ROOT / "examples" / "my_ops.toml"


@pytest.fixture(scope="module")
def ops():
    return pyew.load_spec(SPEC)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("n", [0, 1, 7, 1000003])
def test_softplus_over_dtypes_sizes_and_params(ops, dtype, n, rng):
    x = inputs(rng, n, dtype, "x", -30, 30)["x"]
    if n >= 7:
        x[:7] = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 20.0, -100.0]).astype(x.dtype)
    for beta in (1.0, 0.5, 3.0):
        out = poison(pyew.empty((n,), dtype))
        r = ops.softplus(pyew.asarray(x), beta=beta, out=out)
        assert r is out
        check(out, {"x": x}, parsed(f"softplus(x, beta={beta})"), f"{dtype} n={n} beta={beta}")


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_bias_gelu_with_a_row_bias_and_numpy_in_and_out(ops, dtype, rng):
    x = rng.uniform(-5, 5, (301, 257)).astype(dt.BY_NAME[dtype].np)
    b = rng.uniform(-1, 1, (257,)).astype(dt.BY_NAME[dtype].np)
    got = ops.bias_gelu(pyew.asarray(x), pyew.asarray(b))
    assert isinstance(got, pyew.DeviceArray) and got.shape == x.shape and got.dtype == x.dtype
    check(got, {"x": x, "b": b}, parsed("bias_gelu(x, b)"), dtype)
    host = ops.bias_gelu(x, b)
    assert isinstance(host, np.ndarray)
    check(host, {"x": x, "b": b}, parsed("bias_gelu(x, b)"), f"{dtype} numpy")


@pytest.mark.parametrize("offset", [1, 2, 3, 5])
def test_misaligned_views(ops, offset, rng):
    x = rng.uniform(-4, 4, 10007).astype(np.float32)
    d = pyew.asarray(x)
    check(ops.softplus(d[offset:]), {"x": x[offset:]}, parsed("softplus(x)"), f"offset {offset}")
    check(ops.bias_gelu(d[offset:], d[:-offset]), {"x": x[offset:], "b": x[:-offset]}, parsed("bias_gelu(x, b)"))


def test_formulas_use_loaded_ops(ops, rng):
    v = inputs(rng, 100003, "float32", "xy")
    expr = "softplus(x, beta=2.0) * bias_gelu(x, y) - 1"
    check(pyew.evaluate(expr, local_dict={k: pyew.asarray(a) for k, a in v.items()}), v, parsed(expr))
    check(pyew.evaluate("softplus(x) + y", local_dict=v), v, parsed("softplus(x) + y"))      # numpy in and out

    @pyew.fuse
    def f(x, y):
        return ops.bias_gelu(ops.softplus(x, beta=0.5), y) * 2
    check(f(pyew.asarray(v["x"]), pyew.asarray(v["y"])), v, parsed("bias_gelu(softplus(x, beta=0.5), y) * 2"))


def test_errors_write_nothing(ops, rng):
    x = pyew.asarray(rng.uniform(-1, 1, 1000).astype(np.float32))
    out = poison(pyew.empty((999,), "float32"))
    with pytest.raises(ValueError):
        ops.softplus(x, out=out)
    assert np.isnan(out.get()).all()


def test_a_new_process_reads_the_kernels_from_the_disk_cache(tmp_path):
    script = textwrap.dedent(f"""
        import json, sys, numpy as np, pyew
        from pyew import jit
        ops = pyew.load_spec({str(SPEC)!r})
        r = ops.softplus(pyew.asarray(np.linspace(-3, 3, 1001, dtype=np.float32)), beta=1.5).get()
        print(json.dumps(dict(jit.STATS, ok=bool(np.isfinite(r).all()), nvrtc="cuda.bindings.nvrtc" in sys.modules)))
    """)
    env = dict(os.environ, PYEW_CACHE_DIR=str(tmp_path),
               PYTHONPATH=os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))))
    runs = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        runs.append(__import__("json").loads(r.stdout.strip().splitlines()[-1]))
    assert runs[0]["compiled"] >= 1 and runs[0]["ok"]
    assert runs[1]["compiled"] == 0 and runs[1]["disk"] >= 1 and runs[1]["ok"] and not runs[1]["nvrtc"]


def test_a_changed_definition_compiles_anew(tmp_path, rng):
    """An op loaded again with another definition: NVRTC finds its new device function (the latest
    folder is searched first), in its own calls (from the functions returned before too), in
    formulas naming it, and in an op that calls it."""
    spec = tmp_path / "mine.toml"

    def write(k):
        ops = (("scaled_tail", f"x * C({k})", f"x * {k}"),
               ("scaled_tail_plus", "scaled_tail(x) + C(1)", f"x * {k} + 1"))
        spec.write_text("".join(f'[[op]]\nname = "{n}"\ninputs = ["x"]\ndtypes = ["float32", "float16"]\n'
                                f'expr = "{e}"\nref = "{r}"\ndoc = "{n}."\n\n' for n, e, r in ops))
    x = rng.uniform(-4, 4, 4099).astype(np.float32)       # atol: near x * k = -1 the kernel's fma rounds once
    d = pyew.asarray(x)
    write(3)
    first = pyew.load_spec(spec)
    np.testing.assert_allclose(first.scaled_tail(d).get(), x * 3, rtol=1e-6, atol=1e-6)
    got = pyew.evaluate("scaled_tail_plus(x) * 2", {"x": d}).get()
    np.testing.assert_allclose(got, (x * 3 + 1) * 2, rtol=1e-6, atol=1e-6)
    write(5)
    second = pyew.load_spec(spec)
    for got in (second.scaled_tail(d), first.scaled_tail(d)):
        np.testing.assert_allclose(got.get(), x * 5, rtol=1e-6, atol=1e-6)
    got = pyew.evaluate("scaled_tail_plus(x) * 2", {"x": d}).get()
    np.testing.assert_allclose(got, (x * 5 + 1) * 2, rtol=1e-6, atol=1e-6)
    h = x.astype(np.float16)
    np.testing.assert_allclose(second.scaled_tail_plus(h).astype(np.float64), h.astype(np.float64) * 5 + 1,
                               rtol=2e-3)
