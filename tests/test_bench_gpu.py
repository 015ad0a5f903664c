"""The benchmark on the GPU: the counterparts it derives for each map op compute what pyew computes
(PyTorch's forms writing into pyew's buffers bit for bit what PyTorch's own calls give), the
benchmark library's kernels give right results (the naive twins, dot's per-thread atomics), and a
short run of the benchmark's suites leaves no failure behind."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import pyew
from pyew import dtypes as dt
from pyew import library
from pyew.bench import benchlib, cli, peers
from pyew.bench.harness import Run, map_cases, random_device

from .helpers import poison, random_array
from .reference import assert_matches, evaluate

pytestmark = pytest.mark.gpu
N = 4099                          # not a whole number of 16-byte packs of any dtype


def _cases():
    return map_cases(library.get().manifest)


def _bench():
    run = Run(cli.parse_args([]))
    run.lib = library.get()
    lib = benchlib.get(run)
    if not lib:
        pytest.skip("; ".join(run.notes))
    return lib


def test_torch_into_forms_match_torchs_own_calls(torch_cuda, rng):
    torch, seen = torch_cuda, set()
    peer = peers.TorchPeer("torch", torch)
    for case in _cases():
        into, (own, why) = peer.into(case), peer.op(case)
        if into is None:
            continue
        assert own is not None, why
        arrays = [random_device(rng, d, (N,)) for d in case.ins]          # a wrap does not own its memory
        xs, out = [peer.wrap(a) for a in arrays], poison(pyew.empty((N,), case.out_dtype))
        got, want = into(*xs, out=peer.wrap(out)), own(*xs)
        torch.cuda.synchronize()
        assert got.data_ptr() == out.ptr and want.dtype == got.dtype, case.label
        assert torch.allclose(peer.wrap(out), want, rtol=0, atol=0, equal_nan=True), case.label
        seen.add(case.name)
    assert {"relu", "sigmoid", "gelu_tanh", "hardshrink", "add_relu", "to_bfloat16"} <= seen, seen


@pytest.mark.parametrize("name", ["torch", "cupy"])
def test_gpu_peers_compute_what_pyew_computes(name, request, rng):
    """Each counterpart derived for a map op against pyew's result on the same inputs, within the
    looser of the two libraries' accuracies (a peer may compute 16-bit types in their own
    precision). One that raises is what the benchmark notes and skips; one that differs is listed."""
    mod = request.getfixturevalue("torch_cuda" if name == "torch" else "cupy")
    peer = (peers.TorchPeer if name == "torch" else peers.CupyPeer)(name, mod)
    compared, differ = [], []
    for case in _cases():
        fn, _ = peer.op(case)
        # no integer zeros: x // 0 and x % 0 are 0 in numpy and pyew, and something else in torch
        xs = [random_array(rng, N, d) for d in case.ins]
        xs = [np.where(x == 0, 1, x) if x.dtype.kind in "iu" else x for x in xs]
        ds = [pyew.asarray(x) for x in xs]           # kept alive until the peer's kernel has run
        try:
            theirs = fn and pyew.asarray(fn(*[peer.wrap(d) for d in ds])).get()
        except Exception:
            continue
        if theirs is None:
            continue
        mine = getattr(pyew, case.name)(*xs, **case.params)
        if theirs.dtype != mine.dtype:       # another function (torch.reciprocal of ints is float): not comparable
            continue
        tol = 2e-2 if {case.dtype, case.out_dtype} & {"float16", "bfloat16"} else 1e-4
        try:
            assert theirs.dtype == mine.dtype and theirs.shape == mine.shape
            if dt.lookup(mine.dtype).kind == "float":
                np.testing.assert_allclose(theirs.astype(np.float64), mine.astype(np.float64), rtol=tol, atol=tol,
                                           equal_nan=True)
            else:
                np.testing.assert_array_equal(theirs, mine)
        except AssertionError as e:
            differ.append(f"{case.label}: {str(e).strip().splitlines()[0]}")
        compared.append(case.label)
    assert not differ, differ
    assert len(compared) > len(_cases()) // 2, compared


def test_naive_twins_compute_the_op(rng):
    lib = _bench()
    cases = [c for c in _cases() if (c.name, c.dtype, "naive") in lib]
    assert cases, "the benchmark library has no naive entry"
    stream = pyew.runtime.DEFAULT_STREAM
    for case in cases:
        for n in (0, 1, 255, 257, 100_003):
            arrays = [random_array(rng, n, d) for d in case.ins]
            ins = [pyew.asarray(a) for a in arrays]
            out = poison(pyew.empty(n + 7, case.out_dtype))[3:n + 3]         # a misaligned output, guarded
            sym, fn = lib[(case.name, case.dtype, "naive")]
            library.get().check(fn(out.ptr, *[x.ptr for x in ins], n, *case.params.values(), stream.handle,
                                   *stream.dims), sym)
            ref = evaluate(case.op.ref, case.op.inputs, arrays, case.params, dt.BY_NAME[case.dtype])
            assert_matches(out.get(), ref, dt.BY_NAME[case.out_dtype], f"{sym} n={n}", rtol=case.op.rtol)


def _dot(lib, method, a, b):
    stream = pyew.runtime.DEFAULT_STREAM
    res, work = pyew.empty((), a.dtype), pyew.empty(4, "float32")
    sym, fn = lib[("dot", dt.lookup(a.dtype).name, method)]
    library.get().check(fn(res.ptr, work.ptr, a.ptr, b.ptr, a.size, stream.handle, *stream.dims), sym)
    return float(res.get())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("method", ["half_atomic", "half2_pack"])
def test_dot_atomics_exact_on_sparse_data(dtype, method, rng):
    """Sparse +-1 data: every per-thread sum and running total is an integer of magnitude <= 200,
    exact in float16 and bfloat16, so the atomics must give the exact dot; also on views."""
    lib = _bench()
    for n in (0, 1, 77, 4097, 2**20 + 5):
        a = np.zeros(n + 1, dt.BY_NAME[dtype].np)
        hot = rng.choice(n, size=min(n, 200), replace=False) if n else []
        a[1:][hot] = rng.choice([-1.0, 1.0], size=len(hot))
        b = rng.choice([-1.0, 1.0], size=n + 1).astype(a.dtype)
        exact = float(np.dot(a[1:].astype(np.float64), b[1:].astype(np.float64)))
        assert _dot(lib, method, pyew.asarray(a[1:]), pyew.asarray(b[1:])) == exact, f"n={n}"
        assert _dot(lib, method, pyew.asarray(a)[1:], pyew.asarray(b)[1:]) == exact, f"n={n} views"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_dot_atomics_near_fast_on_random_data(dtype, rng):
    """Random data: each atomic adds a rounded partial sum, so the bound is one rounding of the
    running total per thread."""
    lib, n = _bench(), 50_000
    a, b = random_array(rng, n, dtype, -1, 1), random_array(rng, n, dtype, -1, 1)
    exact = float(np.dot(a.astype(np.float64), b.astype(np.float64)))
    terms = float(np.abs(a.astype(np.float64) * b.astype(np.float64)).sum())
    eps = {"float16": 2.0**-11, "bfloat16": 2.0**-8}[dtype]
    for method in ("half_atomic", "half2_pack"):
        assert abs(_dot(lib, method, pyew.asarray(a), pyew.asarray(b)) - exact) <= n * eps * terms, method
        nan = pyew.asarray(np.full(8, np.nan, a.dtype))
        assert np.isnan(_dot(lib, method, nan, pyew.asarray(b[:8])))


def test_a_short_run_of_every_suite(tmp_path, capsys):
    """The benchmark itself on this GPU, small: every suite runs and none notes a failure."""
    assert cli.main(["--quick", "--sizes", "16,18", "--numpy-sizes", "16", "--ops", "relu,add,mul,sigmoid,to_float16,"
                     "to_float32", "--repeat", "3", "--max-time", "300", "--out", str(tmp_path), "--no-png"]) == 0
    doc = json.loads(Path(tmp_path / "bench.json").read_text())
    assert not [n for n in doc["notes"] if "failed" in n or "stopped" in n], doc["notes"]
    assert {r["suite"] for r in doc["rows"]} >= {"copy", "map", "upsample", "relu_mask", "dot", "layouts",
                                                 "overhead", "interop", "firstcall", "numpy", "pcie", "crossover"}
    assert doc["copy_gbps"] > 0 and all(r["ms"] > 0 for r in doc["rows"] if r["suite"] == "map")
