"""The benchmark harness without a GPU: byte counts, option parsing, suite selection, table/JSON/PNG
writing, the targets, peers that are missing, the CPU peers' expressions, and the timing logic on
simulated events and clocks. A whole run on a simulated GPU is in test_bench_run.py. No timing is
asserted."""
from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import types
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

pytest.importorskip("mako", reason="mako (the generator's template engine) is not installed")

from generator.render import generate
from generator.render import manifest as make_manifest
from generator.spec import load
from pyew import dtypes as dt
from pyew import library
from pyew import runtime as rt
from pyew.bench import cli, cpu_peers, map_suites, numpy_suite, peers, report, report_host, targets, timing, traffic
from pyew.bench.context import Progress, Run
from pyew.bench.data import random_host, random_host_n, stride
from pyew.bench.map_suites import map_cases
from pyew.bench.suites import SUITES
from pyew.bench.timing import rotation_slots

from . import reference

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "libew" / "ops.toml"


# ---- a manifest of pyew's own dataclasses, from the generator's JSON ------------------------------------

def fake_manifest(raw: dict, fn_for=None) -> library.Manifest:
    """library.Manifest for a generator manifest dict; fn_for(op, kernel, entry) gives each entry's
    callable (default: one returning 0)."""
    fn_for = fn_for or (lambda o, k, e: (lambda *a: 0))
    ops = []
    for o in raw["ops"]:
        kernels = []
        for k in o["kernels"]:
            entries = tuple(library.Entry(role=e["role"], symbol=e["symbol"],
                                          args=tuple((a, kind) for a, kind in e["args"]), fn=fn_for(o, k, e))
                            for e in k["entries"])
            kernels.append(library.Kernel(dtype=dt.BY_NAME[k["dtype"]], out_dtype=dt.BY_NAME[k["out_dtype"]],
                                          paired=bool(k.get("paired")), entries=entries))
        params = tuple(library.Param(name=p["name"], type=p["type"], default=p["default"]) for p in o["params"])
        ops.append(library.Op(name=o["name"], kind=o["kind"], inputs=tuple(o["inputs"]), params=params,
                              doc=o.get("doc", ""), ref=o.get("ref", ""), out=o.get("out"),
                              source=o.get("source", ""), rtol=o.get("rtol"), tuning=o.get("tuning"),
                              kernels=tuple(kernels)))
    return library.Manifest(abi=raw["abi"], spec_files=(), build_command="make all", ops=tuple(ops), raw=raw)


@pytest.fixture(scope="module")
def spec_raw():
    return make_manifest(load([SPEC]))


@pytest.fixture(scope="module")
def spec_manifest(spec_raw):
    return fake_manifest(spec_raw)


# ---- bytes and rates -------------------------------------------------------------------------------

def test_map_bytes_unary_binary_casts():
    n = 1 << 20
    assert traffic.map_bytes(n, ["float32"], "float32") == 8 * n
    assert traffic.map_bytes(n, ["float16", "float16"], "float16") == 6 * n
    assert traffic.map_bytes(n, ["float64"] * 2, "float64") == 24 * n
    assert traffic.map_bytes(n, ["float16"], "float32") == 6 * n          # cast f16 -> f32
    assert traffic.map_bytes(n, ["float64"], "bfloat16") == 10 * n        # cast f64 -> bf16
    assert traffic.map_bytes(n, ["int64", "int64"], "int64") == 24 * n
    assert traffic.copy_bytes(1 << 30) == 2 << 30


def test_cases_follow_the_manifest(spec_manifest):
    cases = {(c.op, c.dtype): c for c in map_cases(spec_manifest)}
    assert cases[("gelu", "bfloat16")].bytes(1000) == 4000
    assert cases[("add", "float32")].bytes(1000) == 12000
    assert cases[("to_float32", "float16")].bytes(1000) == 6000
    assert cases[("to_float16", "float32")].bytes(1000) == 6000
    assert cases[("elu", "float32")].params == {"alpha": 1.0}
    assert cases[("scale", "float32")].params == {"alpha": 1.5}     # required param: the bench's value
    c = cases[("gelu", "float16")]
    assert c.symbol == "ew_gelu_f16" and c.naive.symbol == "ew_naive_gelu_f16"
    assert c.source.endswith("libew/ops.toml")
    assert {c.op for c in map_cases(spec_manifest, ops=["add"], dtypes=["float16"])} == {"add"}


def test_gbps_pct_and_nbytes():
    assert traffic.gbps(2_000_000_000, 1.0) == pytest.approx(2000.0)
    assert traffic.gbps(10, 0) is None and traffic.gbps(10, None) is None
    assert traffic.pct(1500.0, 3000.0) == pytest.approx(50.0)
    assert traffic.pct(None, 3000.0) is None and traffic.pct(1.0, None) is None
    a, b = np.zeros(10, np.float32), np.zeros(3, np.float64)
    assert traffic.nbytes_of(a, (b, None), [a]) == 40 + 24 + 40


def test_rotation_slots():
    l2 = 50 << 20
    assert rotation_slots(1 << 30, l2, capacity=100) == 1            # far past L2: no rotation
    assert rotation_slots(1 << 20, l2, capacity=1000) == 200           # 4 x L2 / 1 MiB
    assert rotation_slots(1 << 20, l2, capacity=16) == 16              # capped by the pools
    assert rotation_slots(0, l2, capacity=16) == 1


def test_random_data_never_zero():
    rng = np.random.default_rng(1)
    for name in ("float32", "float64", "float16", "bfloat16", "int32", "int64"):
        v = random_host(rng, name, 4096)
        assert v.dtype == dt.BY_NAME[name].np
        f = v.astype(np.float64)
        assert np.all(f != 0) and (f < 0).any() and (f > 0).any()
    assert stride(1) == 256 and stride(256) == 256 and stride(257) == 512
    with mock.patch("pyew.bench.data.BLOCK", 1000):
        t = random_host_n(rng, "float16", 4500)
    assert t.dtype == np.float16 and t.size == 4500 and np.array_equal(t[1000:2000], t[:1000])
    assert np.array_equal(t[4000:], t[:500]) and np.all(t != 0)


# ---- option parsing and suite selection --------------------------------------------------------------

def test_parse_sizes():
    assert cli.parse_sizes("16:28") == [1 << e for e in range(16, 29)]
    assert cli.parse_sizes("16:28:4") == [1 << 16, 1 << 20, 1 << 24, 1 << 28]
    assert cli.parse_sizes("20,2^24,16-17") == [1 << 16, 1 << 17, 1 << 20, 1 << 24]
    assert cli.parse_sizes("1000,20") == [1000, 1 << 20]                 # > 40: an element count
    for bad in ("abc", "28:16", "16:20:0", "", "2^40"):
        with pytest.raises(argparse.ArgumentTypeError):
            cli.parse_sizes(bad)


def test_parse_args_defaults_and_quick():
    a = cli.parse_args([])
    assert a.sizes == [1 << e for e in range(16, 29)] and a.repeat == cli.DEFAULT_REPEAT
    assert a.suites == list(SUITES) and a.peers == ["torch", "cupy", "numpy", "numexpr"]
    assert a.out == Path("bench-out") and a.max_time == cli.DEFAULT_MAX_TIME
    assert not a.sustained and a.sustained_seconds == 1.0 and not a.sizes_given
    assert a.numpy_sizes is None and a.numpy_repeat is None and a.cpu_peers_max is None
    q = cli.parse_args(["--quick", "--suites", "map,copy", "--dtypes", "half,f32", "--ops", "gelu,add",
                        "--peers", "none", "--out", "x"])
    assert q.sizes == [1 << 16, 1 << 20, 1 << 24, 1 << 28] and q.repeat == cli.QUICK_REPEAT
    assert q.suites == ["copy", "map"]                                   # always in run order
    assert q.dtypes == ["float16", "bfloat16", "float32"] and q.ops == ["gelu", "add"] and q.peers == []
    assert cli.parse_args(["--quick", "--repeat", "3", "--sizes", "10"]).repeat == 3
    s = cli.parse_args(["--sustained", "--sustained-seconds", "2.5", "--numpy-sizes", "20,26",
                        "--numpy-repeat", "7", "--cpu-peers-max", "28", "--sizes=20:24"])
    assert s.sustained and s.sustained_seconds == 2.5 and s.numpy_sizes == [1 << 20, 1 << 26]
    assert s.numpy_repeat == 7 and s.cpu_peers_max == 1 << 28 and s.sizes_given


def test_suites_run_in_registry_order():
    assert list(SUITES) == ["copy", "template", "dot", "upsample", "relu_mask", "layouts", "overhead", "interop",
                            "firstcall", "numpy", "map"]
    assert cli.parse_args(["--suites", "map,numpy,interop"]).suites == ["interop", "numpy", "map"]


@pytest.mark.parametrize("argv", [["--suites", "nope"], ["--suites", "roundtrip"],
                                  ["--dtypes", "float8"], ["--repeat", "0"], ["--sizes", "x"],
                                  ["--sustained-seconds", "0"], ["--numpy-repeat", "0"],
                                  ["--cpu-peers-max", "20,24"]])
def test_parse_args_rejects(argv, capsys):
    with pytest.raises(SystemExit) as e:
        cli.parse_args(argv)
    assert e.value.code == 2


def test_numpy_sizes_follow_the_flags():
    ns = lambda argv: numpy_suite.numpy_sizes(cli.parse_args(argv))        # noqa: E731
    assert ns([]) == [1 << 26, 1 << 20, 1 << 24, 1 << 28]                  # the targets' size first
    assert ns(["--quick"]) == [1 << 20, 1 << 24]
    assert ns(["--sizes", "16:28:2"]) == [1 << 26, 1 << 20, 1 << 24, 1 << 28]   # a range filter
    assert ns(["--sizes", "22:26"]) == [1 << 26, 1 << 24]
    assert ns(["--sizes", "10,12"]) == []
    assert ns(["--sizes", "10,12", "--numpy-sizes", "12"]) == [1 << 12]


def test_unknown_op_is_refused(spec_manifest):
    args = cli.parse_args(["--ops", "gelu,nosuch"])
    msg = cli.check_ops(args, spec_manifest)
    assert "nosuch" in msg and "gelu" in msg.split("has:")[1]
    assert cli.check_ops(cli.parse_args(["--ops", "gelu"]), spec_manifest) is None


def test_cli_help_and_dispatch():
    r = subprocess.run([sys.executable, "-m", "pyew", "bench", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for word in ("--sizes", "--sustained", "--sustained-seconds", "--numpy-sizes", "--cpu-peers-max",
                 "relu_mask", "interop", "firstcall", "numpy", "template"):
        assert word in r.stdout, word
    r = subprocess.run([sys.executable, "-m", "pyew", "frobnicate"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2 and "unknown command" in r.stderr
    r = subprocess.run([sys.executable, "-m", "pyew"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2 and "bench" in r.stdout


# ---- peers ---------------------------------------------------------------------------------------------

def test_missing_peers_are_skipped_with_a_note(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)      # import torch -> ImportError
    monkeypatch.setitem(sys.modules, "cupy", None)
    monkeypatch.setitem(sys.modules, "numexpr", None)
    notes = []
    got = peers.load(["torch", "cupy", "numexpr", "numpy", "jax"], notes.append)
    assert list(got) == ["numpy"] and isinstance(got["numpy"], peers.CpuPeer)
    for name in ("torch", "cupy", "numexpr"):
        assert any(n.startswith(f"{name} skipped: ModuleNotFoundError") for n in notes), notes
    assert any("unknown peer 'jax'" in n for n in notes)


def test_peer_without_gpu_is_skipped(monkeypatch):
    fake = types.ModuleType("torch")
    fake.cuda = types.SimpleNamespace(is_available=lambda: False)
    monkeypatch.setitem(sys.modules, "torch", fake)
    notes = []
    assert peers.load(["torch"], notes.append) == {}
    assert "is_available() is False" in notes[0]


def test_every_default_map_op_has_peer_mappings(spec_raw):
    names = {o["name"] for o in spec_raw["ops"] if o["kind"] == "map"}
    assert names <= set(peers.TORCH_MAP), names - set(peers.TORCH_MAP)
    assert names <= set(peers.TORCH_INTO), names - set(peers.TORCH_INTO)
    no_cupy = {n for n in names if not peers.mappable(n)["cupy"]}
    assert no_cupy <= {"to_bfloat16"}                          # CuPy has no bfloat16
    no_numexpr = names - set(cpu_peers.NUMEXPR_MAP)
    assert no_numexpr <= set(cpu_peers.NUMEXPR_WHY_NOT), no_numexpr


def test_unmapped_op_gives_a_reason():
    tp = peers.TorchPeer("torch", mock.MagicMock())
    fn, why = tp.op("my_custom_op", "float32", {})
    assert fn is None and "no mapping" in why and "my_custom_op" in why
    cp = peers.CupyPeer("cupy", mock.MagicMock())
    assert cp.op("my_custom_op", "float32", {})[0] is None
    fn, why = cp.op("gelu", "bfloat16", {})
    assert fn is None and "bfloat16" in why
    cpu = peers.CpuPeer("numpy", np)
    assert cpu.op("relu", "float32", {})[0] is None


def test_cupy_kernels_compute_in_the_right_type():
    cp = mock.MagicMock()
    peer = peers.CupyPeer("cupy", cp)
    peer.op("elu", "float16", {"alpha": 1.0})
    in_params, out_params, body, _ = cp.ElementwiseKernel.call_args.args
    assert (in_params, out_params) == ("T x", "T y")
    assert body.startswith("typedef float C; C v = (C)x;") and "(C)(1.0)" in body
    peer.op("add_relu", "float64", {})
    assert cp.ElementwiseKernel.call_args.args[2].startswith("typedef double C;")
    peer.op("relu", "int64", {})
    assert cp.ElementwiseKernel.call_args.args[2].startswith("typedef long long C;")
    calls = cp.ElementwiseKernel.call_count
    peer.op("elu", "float32", {"alpha": 1.0})                 # same compute type: the cached kernel
    assert cp.ElementwiseKernel.call_count == calls


class _Buffers:
    """Stands in for a data.Pool: view(slot, n) at a known address."""

    def __init__(self, ptr):
        self.ptr = ptr

    def view(self, slot, n):
        return types.SimpleNamespace(ptr=self.ptr + slot * n, shape=(n,), dtype=np.dtype(np.float32))


def test_torch_is_timed_on_pyews_buffers(monkeypatch):
    t = mock.MagicMock()
    peer = peers.TorchPeer("torch", t)
    peer.wrap = lambda a: ("tensor at", a.ptr)
    notes = []
    run = types.SimpleNamespace(peers={"torch": peer}, note=notes.append)
    relu = types.SimpleNamespace(op="relu", dtype="float32", params={})
    for c in map_suites._calls(run, relu, "torch", 8, [_Buffers(100)], _Buffers(1000), 2):
        c()
    assert t.clamp_min.call_args_list == [mock.call(("tensor at", 100), 0, out=("tensor at", 1000)),
                                          mock.call(("tensor at", 108), 0, out=("tensor at", 1008))]
    add = types.SimpleNamespace(op="add_relu", dtype="float32", params={})
    map_suites._calls(run, add, "torch", 8, [_Buffers(100), _Buffers(200)], _Buffers(1000), 1)[0]()
    t.add.assert_called_with(("tensor at", 100), ("tensor at", 200), out=("tensor at", 1000))
    t.relu_.assert_called_with(t.add.return_value)
    # an out= form that cannot be built (here a param missing) falls back to the allocating form
    assert peer.op_into("elu", "float32", {}) is None
    # an op without an out= form allocates its result, as a torch user's call does
    monkeypatch.delitem(peers.TORCH_INTO, "relu")
    map_suites._calls(run, relu, "torch", 8, [_Buffers(100)], _Buffers(1000), 1)[0]()
    t.relu.assert_called_once_with(("tensor at", 100))
    assert not notes


def test_torch_views_bfloat16_through_int16():
    t = mock.MagicMock()
    peer = peers.TorchPeer("torch", t)
    a = types.SimpleNamespace(shape=(4,), ptr=1 << 20, dtype=dt.BY_NAME["bfloat16"].np)
    peer.wrap(a)
    iface = t.as_tensor.call_args.args[0].__cuda_array_interface__
    assert iface["typestr"] == "<i2" and iface["data"] == (1 << 20, False)
    t.as_tensor.return_value.view.assert_called_with(t.bfloat16)


def test_round_trips_copy_in_and_out():
    t = mock.MagicMock()
    peer = peers.TorchPeer("torch", t)
    op = mock.MagicMock()
    x = np.ones(3, np.float32)
    r = peer.round_trip(op)(x, x)
    t.from_numpy.assert_called_with(x)
    assert op.call_count == 1 and r is op.return_value.cpu.return_value.numpy.return_value
    cp = mock.MagicMock()
    r = peers.CupyPeer("cupy", cp).round_trip(op)(x)
    cp.asarray.assert_called_with(x) and None
    assert r is op.return_value.get.return_value


# ---- the CPU peers: numpy's ref expressions and numexpr's table -----------------------------------------

def _numpy_cases(manifest):
    return [c for c in map_cases(manifest, dtypes=["float32", "float16"]) if numpy_suite.is_default(c)]


def test_numpy_ref_in_the_inputs_dtype(spec_manifest):
    pytest.importorskip("scipy", reason="scipy gives the numpy peer erf/erfc")
    erf = cpu_peers.scipy_erf()
    rng = np.random.default_rng(3)
    seen = set()
    for c in _numpy_cases(spec_manifest):
        op = spec_manifest.op(c.op)
        fn, why = cpu_peers.numpy_ref(op, c.params, dt.BY_NAME[c.out_dtype].np, erf)
        assert fn is not None, why
        xs = [random_host(rng, c.dtype, 257) for _ in c.inputs]
        got = fn(*xs)
        assert got.dtype == dt.BY_NAME[c.out_dtype].np and got.shape == (257,), c.label
        assert all(not np.shares_memory(got, x) for x in xs), c.label           # a new array, as the op's
        want = reference.evaluate(op.ref, op.inputs, xs, c.params, dt.BY_NAME[c.dtype])
        tol = 1e-5 if c.dtype == "float32" and c.out_dtype in ("float32", "float64") else 2e-2
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol, err_msg=c.label)
        seen.add(c.op)
    assert {"gelu", "sigmoid", "add", "to_float16", "to_float64", "scale"} <= seen


def test_numpy_ref_keeps_float32_float32(spec_manifest):
    op = spec_manifest.op("gelu")                    # np.sqrt(2) must not promote the float32 input
    calls = []
    erf = (np.tanh, lambda v: calls.append(v.dtype) or np.ones_like(v))
    fn, _ = cpu_peers.numpy_ref(op, {}, np.dtype(np.float32), erf)
    fn(np.linspace(-1, 1, 8, dtype=np.float32))
    assert calls == [np.float32]
    assert cpu_peers.WEAK_NP.sqrt(2) == pytest.approx(2 ** 0.5) and isinstance(cpu_peers.WEAK_NP.sqrt(2), float)


def test_numpy_ref_without_scipy(spec_manifest):
    fn, why = cpu_peers.numpy_ref(spec_manifest.op("gelu"), {}, np.dtype(np.float32), None)
    assert fn is None and "scipy" in why
    fn, _ = cpu_peers.numpy_ref(spec_manifest.op("sigmoid"), {}, np.dtype(np.float32), None)
    assert fn is not None                            # no erf in its ref


def test_numexpr_table_parses_and_matches(spec_manifest):
    ne = pytest.importorskip("numexpr")
    rng = np.random.default_rng(4)
    for name, (expr, _) in cpu_peers.NUMEXPR_MAP.items():
        op = spec_manifest.op(name)
        assert op is not None, f"{name} is not a default op"
        params = {p.name: (p.default if p.default is not None else 1.5) for p in op.params}
        fn, why = cpu_peers.numexpr_fn(ne, op, "float32", params)
        assert fn is not None, why
        xs = [random_host(rng, "float32", 300) for _ in op.inputs]
        got = fn(*xs)
        want_dtype = np.float64 if name == "to_float64" else np.float32
        assert got.dtype == want_dtype, (name, expr, got.dtype)
        want = reference.evaluate(op.ref, op.inputs, xs, params, dt.BY_NAME["float32"])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)
    fn, why = cpu_peers.numexpr_fn(ne, spec_manifest.op("gelu"), "float32", {})
    assert fn is None and "erf" in why
    fn, why = cpu_peers.numexpr_fn(ne, spec_manifest.op("relu"), "float16", {})
    assert fn is None and "float16" in why
    assert cpu_peers.numexpr_threads(ne) >= 1


def test_default_ops_for_the_numpy_suite(spec_manifest):
    assert numpy_suite.is_default(spec_manifest.op("gelu"))
    assert not numpy_suite.is_default(types.SimpleNamespace(source="examples/my_ops.toml"))
    assert numpy_suite.is_default(types.SimpleNamespace(source="/abs/checkout/libew/ops.toml"))
    run = types.SimpleNamespace(lib=types.SimpleNamespace(manifest=spec_manifest),
                                args=types.SimpleNamespace(ops=None, dtypes=None))
    cases = numpy_suite.numpy_cases(run)
    labels = {nc.case.label for nc in cases}
    assert {"relu float32", "relu float16", "to_float16 float32", "to_float32 float16", "to_float64 float16",
            "to_bfloat16 float32"} <= labels
    assert not any(nc.case.dtype not in ("float32", "float16") for nc in cases)
    assert "to_float32 float32" not in labels                         # no such kernel


# ---- report: tables, JSON, PNG, targets ----------------------------------------------------------------

def _rows():
    n = 1 << 28
    rows = [{"suite": "copy", "name": "memcpy D2D", "dtype": None, "n": 1 << 30, "impl": "cudaMemcpyAsync",
             "ms": 1.0, "bytes": 3_000_000_000, "gbps": 3000.0}]

    def m(op, dtype, impl, ms, arity, out=None, size=n, nbytes=None):
        b = nbytes or size * 4 * (arity + 1)
        rows.append({"suite": "map", "name": op, "dtype": dtype, "out_dtype": out or dtype, "arity": arity,
                     "n": size, "impl": impl, "ms": ms, "bytes": b, "gbps": b / (ms * 1e6)})
        if impl == "pyew" and op == "gelu":
            rows[-1]["tuning"] = "compute"
    for impl, ms in (("pyew", 0.7), ("naive", 1.5), ("torch", 0.9), ("cupy", 1.4)):
        m("gelu", "float16", impl, ms, 1)
        m("gelu", "float16", impl, ms / 4, 1, size=n >> 2)
    for impl, ms in (("pyew", 1.0), ("naive", 2.5), ("torch", 1.1)):
        m("mul", "float16", impl, ms, 2)
    m("to_float32", "float16", "pyew", 0.5, 1, out="float32")
    m("to_float32", "float16", "torch", 1.0, 1, out="float32")
    for impl, us in (("pyew", 3.5), ("torch", 5.0)):
        rows.append({"suite": "overhead", "name": f"{impl}.add(x, y)", "dtype": "float32", "n": 1, "impl": impl,
                     "us_per_call": us, "min_us_per_call": us - 0.3})
    rows.append({"suite": "upsample", "name": "forward", "dtype": "float32", "n": 100, "shape": [1, 1, 10, 10],
                 "impl": "pyew", "ms": 0.4, "bytes": 2000, "gbps": 0.005})
    rows.append({"suite": "upsample", "name": "forward", "dtype": "float32", "n": 100, "shape": [1, 1, 10, 10],
                 "impl": "torch", "ms": 1.0, "bytes": 2000, "gbps": 0.002})
    # the numpy suite
    big = 1 << 26
    for name, bw in (("pinned H2D", 25.0), ("pinned D2H", 26.0), ("pinned both ways", 40.0)):
        moved = 512 << 20 if "both" in name else 256 << 20
        rows.append({"suite": "pcie", "name": name, "dtype": None, "n": 256 << 20, "impl": "cudaMemcpyAsync",
                     "ms": moved / (bw * 1e6), "bytes": moved, "gbps": bw})

    def np_row(op, impl, ms, arity=1, dtype="float32", default=True, **extra):
        nbytes = big * 4 * (arity + 1)
        rows.append({"suite": "numpy", "name": op, "dtype": dtype, "n": big, "impl": impl, "ms": ms,
                     "bytes": nbytes, "gbps": nbytes / (ms * 1e6), "arity": arity, "default": default,
                     "out_dtype": dtype, **extra})
    np_row("sigmoid", "pyew", 18.0, floor_ms=13.4, floor_ratio=18.0 / 13.4, floor_kind="both ways",
           max_abs_diff_vs_numpy=1.2e-7)
    np_row("sigmoid", "numexpr", 30.0)
    np_row("sigmoid", "numpy", 250.0)
    np_row("sigmoid", "torch", 120.0)
    np_row("relu", "pyew", 17.0)
    np_row("relu", "numexpr", 16.0)                               # numexpr wins: the target is missed
    np_row("gelu", "pyew", 19.0)                                  # no numexpr row (no erf)
    np_row("softplus", "pyew", 19.0, default=False)
    np_row("softplus", "numexpr", 5.0, default=False)             # not a default op: not in the target
    np_row("add", "pyew", 26.0, arity=2)
    for k, one, st in ((1 << 8, 30.0, 60.0), (1 << 10, 32.0, 61.0), (1 << 12, 40.0, 62.0), (1 << 14, 90.0, 70.0),
                       (1 << 16, 200.0, 100.0)):
        for impl, us in (("one shot", one), ("streamed", st)):
            rows.append({"suite": "crossover", "name": "sigmoid", "dtype": "float32", "n": k, "impl": impl,
                         "us_per_call": us, "bytes": 8 * k, "ms": us / 1e3})
    for impl, us in (("pyew", 42.0), ("torch", 60.0), ("cupy", 80.0)):
        rows.append({"suite": "small", "name": "sigmoid", "dtype": "float32", "n": 16, "impl": impl,
                     "us_per_call": us, "min_us_per_call": us})
    rows.append({"suite": "small", "name": "add", "dtype": "float32", "n": 16, "impl": "pyew",
                 "us_per_call": 55.0, "min_us_per_call": 50.0})
    for mode, ms in (("stage", 20.0), ("register", 45.0)):
        rows.append({"suite": "transfer", "name": "sigmoid", "dtype": "float32", "n": 1 << 24, "impl": mode,
                     "ms": ms, "bytes": 8 << 24, "gbps": (8 << 24) / (ms * 1e6)})
    rows.append({"suite": "transfer", "name": "cudaHostRegister", "dtype": None, "n": 256 << 20, "impl": "runtime",
                 "ms": 40.0, "bytes": 256 << 20, "gbps": 6.7})
    for t in (1, 4):
        rows.append({"suite": "transfer", "name": "np.copyto pageable -> pinned", "dtype": None, "n": 256 << 20,
                     "impl": f"{t} threads", "threads": t, "ms": 40.0 / t, "bytes": 256 << 20, "gbps": 6.7 * t})
    for impl, foreign, us in (("DeviceArray", 0, 7.0), ("torch", 2, 10.0), ("cupy", 2, 13.0),
                              ("torch + DeviceArray", 1, 8.5)):
        rows.append({"suite": "interop", "name": "pyew.add", "dtype": "float32", "n": 1, "impl": impl,
                     "foreign": foreign, "us_per_call": us, "min_us_per_call": us})
    rows.append({"suite": "interop", "name": "bfloat16 round trip", "dtype": "bfloat16", "n": 4096, "impl": "torch",
                 "ok": True, "check": "torch -> pyew.relu -> torch.from_dlpack"})
    rows.append({"suite": "firstcall", "name": "gelu", "dtype": "float32", "n": 1 << 16, "impl": "pyew",
                 "first_us": 2500.0, "second_us": 30.0, "third_us": 28.0, "lazy_us": 2470.0, "import_ms": 300.0,
                 "setup_ms": 400.0, "primer": "add float64", "primer_first_us": 9000.0, "module_loading": None})
    for impl, ms, gb in (("pyew", 0.75, 2800.0), ("torch", 0.95, 2200.0)):
        rows.append({"suite": "sustained", "name": "gelu", "dtype": "float16", "n": n, "impl": impl, "ms": ms,
                     "bytes": n * 4, "gbps": n * 4 / (ms * 1e6), "calls": 2700, "seconds": 2.0,
                     "segment_gbps": [gb, gb - 20], "burst_gbps": gb + 100})
    for r in rows:
        if r.get("gbps") and r["suite"] == "map":
            r["pct_copy"] = 100 * r["gbps"] / 3000.0
    return rows


META = {"date": "2026-01-01 00:00 UTC", "command": "python -m pyew bench", "seed": 1,
        "device": {"name": "Test GPU", "sms": 132, "l2_bytes": 50 << 20, "capability": [9, 0]},
        "map_order": [["gelu", "float16"], ["mul", "float16"], ["to_float32", "float16"]],
        "transfer_limits": {"small_bytes": 1 << 20}}


def _md_tables_are_rectangular(text):
    for block in text.split("\n\n"):
        lines = [ln for ln in block.splitlines() if ln.startswith("|")]
        if lines:
            widths = {ln.count("|") for ln in lines}
            assert len(widths) == 1, block


def _cells(text, start):
    line = next(ln for ln in text.splitlines() if ln.startswith(start))
    return [c.strip() for c in line.strip("|").split("|")]


def test_table_text():
    text = report.render(_rows(), 3000.0, META, ["torch skipped: test"])
    _md_tables_are_rectangular(text)
    assert "copy ceiling" in text and "**3000 GB/s**" in text
    head = text.split("## Map ops at 2^28 elements")[1]
    cells = _cells(head, "| gelu | float16")
    # tuning, pyew GB/s, % copy, naive, torch, torch %, CuPy, CuPy %, vs naive, vs torch, vs CuPy
    assert cells[2] == "compute"
    assert cells[3] == f"{(1 << 28) * 8 / 0.7e6:.0f}"
    assert cells[10:] == ["2.14x", "1.29x", "2.00x"]
    assert "## Naive vs template (OneFlow's comparison)" in text
    assert "## Casts vs PyTorch (OneFlow's comparison)" in text
    assert "mul float16 | 2^28" in text and "2.50x" in text
    assert "float16 -> float32" in text and "0.50x" in text
    assert "`pyew.add(x, y)` | 3.50" in text
    assert "## pyew by size" in text and "| 2^26 | 2^28 |" in text
    assert "- torch skipped: test" in text
    assert "## pyew's performance targets" in text


def test_numpy_and_host_sections():
    text = report.render(_rows(), 3000.0, META, [])
    numpy_part = text.split("## numpy in, numpy out")[1]
    assert "H2D 25 GB/s, D2H 26 GB/s, both ways 40 GB/s" in numpy_part
    cells = _cells(numpy_part.split("### 2^26 elements")[1], "| sigmoid | float32")
    # pyew, floor, pyew/floor, numpy, numexpr, torch, CuPy, vs numpy, vs numexpr, vs torch, vs CuPy, diff
    assert cells[2:5] == ["18.000 ms", "13.400 ms", "1.34x"]
    assert cells[9:] == ["13.89x", "1.67x", "6.67x", "—", "1.2e-07"]
    cross = text.split("## Crossover")[1]
    assert "from 2^14 elements (128 KiB moved" in cross and "small_bytes is 1 MiB now" in cross
    assert _cells(cross, "| 2^14")[-1] == "streamed" and _cells(cross, "| 2^12")[-1] == "one shot"
    assert _cells(text.split("## Small calls")[1], "| sigmoid")[3:] == ["42.00", "60.00", "80.00"]
    modes = text.split("## Transfer modes")[1]
    assert _cells(modes, "| sigmoid")[3:] == ["20.000 ms", "45.000 ms", "2.25x"]
    raw = text.split("## Raw transfer costs")[1]
    assert "cudaHostRegister of 256 MiB: 40.000 ms" in raw and "| 1 threads | 4 threads |" in raw
    inter = text.split("## Interop")[1]
    assert _cells(inter, "| `pyew.add` on torch |")[-1] == "+1.50"
    assert _cells(inter, "| `pyew.add` on torch + DeviceArray")[-1] == "+1.50"
    assert "equal to torch.relu" in inter
    first = text.split("## First call")[1]
    assert _cells(first, "| gelu")[3:] == ["2500", "30.00", "28.00", "2470"]
    assert "not set (LAZY" in first and "add float64" in first
    sus = text.split("## Sustained")[1]
    assert _cells(sus, "| gelu")[3:6] == ["2900", f"{(1 << 28) * 4 / 0.75e6:.0f}", "2800 / 2780"]


def test_crossover_and_floor_helpers():
    rows = _rows()
    assert report_host.crossover_point(rows) == (1 << 14, 8 << 14)
    only_one_shot = [r for r in rows if not (r["suite"] == "crossover" and r["n"] >= 1 << 14)]
    assert report_host.crossover_point(only_one_shot) is None
    assert "one-shot path is faster up to 2^12" in report_host.crossover_text(only_one_shot)
    # a dip that does not last is no crossover: streamed must stay ahead at every larger size
    dip = [dict(r, us_per_call=10.0) if r["suite"] == "crossover" and r["n"] == 1 << 10 and r["impl"] == "streamed"
           else r for r in rows]
    assert report_host.crossover_point(dip) == (1 << 14, 8 << 14)
    ms, kind = report_host.transfer_floor(rows, 4 << 20, 4 << 20)
    assert kind == "both ways" and ms == pytest.approx((8 << 20) / 40e6)
    assert report_host.transfer_floor(rows, 4 << 20, 0)[1] == "H2D"
    assert report_host.transfer_floor([], 1, 1) == (None, None)


def test_targets():
    items = {t["target"]: t for t in targets.evaluate(_rows(), 3000.0)}
    assert len(items) == len(targets.CHECKS)
    by = lambda s: next(v for k, v in items.items() if k.startswith(s))   # noqa: E731
    assert by("cast f16->f32")["met"] is True                   # 0.5 ms vs 1.0 ms
    assert by("template >= 2x")["met"] is True                  # 2.5x
    assert by("binary ops")["met"] is True                      # mul: torch 1.1 ms, pyew 1.0 ms
    assert by("host overhead")["met"] is True
    assert by("upsample 2x forward")["met"] is True             # 0.4x
    assert by("pyew.dot")["met"] is None                        # not measured
    assert by(">= 1.7x CuPy")["met"] is None                    # no float32 rows
    assert by(">= 3.4x CuPy")["met"] is False                   # gelu f16: 2.0x
    assert "gelu float16" in by("unary ops")["measured"]
    assert by("numpy in/out: sigmoid")["met"] is True            # 18 ms
    assert by("numpy in/out: add")["met"] is False               # 26 ms
    ne = by("numpy in/out: every one-input")
    assert ne["met"] is False and "relu" in ne["measured"] and "no numexpr row for gelu" in ne["measured"]
    assert "softplus" not in ne["measured"]
    assert by("small calls")["met"] is False and "add 55.0" in by("small calls")["measured"]
    assert by("a foreign GPU operand")["met"] is False          # cupy: +3.0 µs per operand
    assert "cupy" in by("a foreign GPU operand")["measured"]
    assert by("pyew.add on 1-element")["met"] is True            # 3.5 vs 5.0 µs


def test_targets_not_measured_on_empty_rows():
    for t in targets.evaluate([], None):
        assert t["met"] is None, t


def test_json_written_and_clean(tmp_path):
    rows = _rows() + [{"suite": "map", "name": "x", "dtype": "float32", "n": 2, "impl": "pyew",
                       "ms": float("nan"), "gbps": float("inf")}]
    paths = report.write_all(tmp_path, rows, 3000.0, META, ["a note"], png=False)
    doc = json.loads(paths["json"].read_text())
    assert doc["copy_gbps"] == 3000.0 and doc["notes"] == ["a note"] and doc["meta"]["seed"] == 1
    assert doc["rows"][-1]["ms"] is None and doc["rows"][-1]["gbps"] is None
    assert {t["target"] for t in doc["targets"]} == {c[0] for c in targets.CHECKS}
    assert paths["table"].read_text().startswith("# pyew benchmark: Test GPU")


def test_png(tmp_path):
    pytest.importorskip("matplotlib")
    paths = report.write_all(tmp_path, _rows(), 3000.0, META, [], png=True)
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_png_without_matplotlib(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    paths = report.write_all(tmp_path, _rows(), 3000.0, META, [], png=True)
    assert "png" not in paths and "matplotlib" in paths["png_note"]
    assert "matplotlib" in json.loads(paths["json"].read_text())["notes"][-1]


def test_progress_throttled_off_a_terminal():
    buf = io.StringIO()
    p = Progress(buf, every=3600)
    p.update("first")
    p.update("second")                 # within `every`: not written
    p.update("third", force=True)
    p.line("a note")
    out = buf.getvalue().splitlines()
    assert len(out) == 3 and "first" in out[0] and "third" in out[1] and out[2] == "a note"


def test_time_limit_skips_with_one_note():
    now = [0.0]
    run = Run(types.SimpleNamespace(max_time=10.0), Progress(io.StringIO()), clock=lambda: now[0])
    assert not run.out_of_time()
    now[0] = 5.0
    assert not run.out_of_time(reserve=4.0)
    now[0] = 7.0
    run.suite = "numpy"
    assert run.out_of_time(reserve=4.0, why="the map sweep") and run.out_of_time(reserve=4.0, why="the map sweep")
    assert len([n for n in run.notes if "for the map sweep" in n]) == 1
    assert not run.out_of_time()                                   # the map sweep still has its time
    now[0] = 11.0
    assert run.out_of_time() and run.out_of_time()
    assert len([n for n in run.notes if "past --max-time" in n]) == 1


# ---- the naive entry points -------------------------------------------------------------------------

def test_naive_entry_in_manifest_and_source(tmp_path, spec_raw):
    for op in spec_raw["ops"]:
        if op["kind"] != "map":
            continue
        for k in op["kernels"]:
            by_role = {e["role"]: e for e in k["entries"]}
            assert {"forward", "naive", "strided"} <= set(by_role), (op["name"], list(by_role))
            fwd, naive = by_role["forward"], by_role["naive"]
            assert naive["symbol"] == fwd["symbol"].replace("ew_", "ew_naive_", 1)
            assert naive["args"] == fwd["args"]
    generate(load([SPEC]), tmp_path)
    src = (tmp_path / "gen" / "ew_elu_f16.cu").read_text()
    assert ("EW_API int ew_naive_elu_f16(void* out, const void* x, int64_t n, double alpha, void* stream, "
            "int sms, int threads_per_sm)") in src and "ew::launch_naive(" in src
    assert src.index("EW_API int ew_elu_f16(") < src.index("EW_API int ew_naive_elu_f16(")
    assert "ew_naive_add_bf16(" in (tmp_path / "ew.h").read_text()


def test_naive_symbols_exported_by_the_built_library():
    lib = library.library_path()
    man_path = lib.parent / "manifest.json"
    if not lib.exists() or not man_path.exists():
        pytest.skip(f"{lib} not built (make all)")
    man = json.loads(man_path.read_text())         # the build's own manifest: no staleness check needed
    want = {e["symbol"] for o in man["ops"] if o["kind"] == "map" for k in o["kernels"]
            for e in k["entries"] if e["role"] == "naive"}
    if not want:
        pytest.skip(f"{lib} was built before the naive entries existed; rebuild with make all")
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
    exported = {ln.split()[-1] for ln in out.splitlines() if " T " in ln}
    assert want <= exported, sorted(want - exported)[:5]


# ---- timing logic on simulated events and clocks --------------------------------------------------------

class _ClockEvent:
    """rt.Event on a fake GPU clock."""
    clock = [0.0]

    def __init__(self, timing=False):
        self.t = None

    def record(self, stream_cu):
        self.t = _ClockEvent.clock[0]

    def synchronize(self):
        pass

    def done(self):
        return True

    def elapsed_ms(self, start):
        return self.t - start.t


def test_gpu_timer_logic_with_simulated_events(monkeypatch):
    """The event bookkeeping of GpuTimer.measure on a fake clock: each call 'takes' 3 ms of GPU time,
    each prefill memset 0.1 ms; a slow call gets fewer reps within the budget."""
    clock = _ClockEvent.clock
    clock[0] = 0.0

    def memset(*a):
        clock[0] += 0.1
    monkeypatch.setattr(rt, "Event", _ClockEvent)
    monkeypatch.setattr(rt, "memset", memset)
    monkeypatch.setattr(rt, "malloc", lambda n, s: 1 << 20)
    monkeypatch.setattr(rt, "free", lambda *a: None)
    monkeypatch.setattr(rt, "synchronize", lambda: None)
    timer = timing.GpuTimer(max_reps=16)
    assert timer.busy_ms == pytest.approx(0.1)
    seen = []

    def call(i):
        clock[0] += 3.0
        seen.append(i)
        return 0
    calls = [lambda i=i: call(i) for i in range(3)]
    t = timer.measure(calls, reps=25, warmup=2, check=lambda rc: None)
    assert t.reps == 16 and t.median_ms == pytest.approx(3.0)            # capped at max_reps
    assert set(seen) == {0, 1, 2}                                         # rotated through every buffer set
    t = timer.measure(calls, reps=10, warmup=1, budget_ms=10.0)
    assert t.reps == 3 and t.median_ms == pytest.approx(3.0)              # 10 ms budget / 3 ms per call
    with pytest.raises(AssertionError):
        timer.measure(calls, reps=2, check=lambda rc: (_ for _ in ()).throw(AssertionError("rc")))
    timer.close()


def test_sustained_runs_until_the_time_is_up(monkeypatch):
    gpu = _ClockEvent.clock
    gpu[0] = 0.0
    wall = [0.0]
    monkeypatch.setattr(rt, "Event", _ClockEvent)
    seen = []

    def call(i):
        gpu[0] += 2.0                      # ms of GPU time
        wall[0] += 0.002                   # the host keeps pace with the GPU
        seen.append(i)
        return 0
    calls = [lambda i=i: call(i) for i in range(2)]
    checked = []
    count, ms = timing.sustained(calls, seconds=0.1, batch=5, check=checked.append, clock=lambda: wall[0])
    assert count == 50 and ms == pytest.approx(100.0) and len(checked) == 10
    assert seen[:4] == [0, 1, 0, 1]


def test_wall_stats_and_per_call(monkeypatch):
    now = [0.0]
    cost = [0.5]                            # seconds per call

    def fn():
        now[0] += cost[0]
    t = timing.wall_stats(fn, reps=5, warmup=1, budget_s=1.0, min_reps=3, clock=lambda: now[0])
    assert t.reps == 3 and t.median_ms == pytest.approx(500.0) and t.warmup_ms == pytest.approx(500.0)
    cost[0] = 0.01
    t = timing.wall_stats(fn, reps=5, warmup=1, budget_s=1.0, clock=lambda: now[0])
    assert t.reps == 5
    t = timing.wall_stats(fn, reps=2, warmup=0, budget_s=1.0, clock=lambda: now[0])
    assert t.reps == 2
    cost[0] = 1e-5
    med, best, calls = timing.per_call_us(fn, budget_s=0.01, repeats=4, clock=lambda: now[0])
    assert med == pytest.approx(10.0, rel=1e-6) and calls % 4 == 0 and 4 * 240 <= calls <= 4 * 250
