"""The benchmark harness without a GPU: options, the peers each op's counterparts are derived
for, the clocks on simulated events, the report and the targets, and the benchmark library's
generation. A whole run on a simulated GPU is in test_bench_run.py. No timing is asserted."""
from __future__ import annotations

import argparse
import dataclasses
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

from generator.render import GeneratorError, generate, generate_bench
from generator.render import manifest as make_manifest
from generator.spec import load
from pyew import dtypes as dt
from pyew import library
from pyew import runtime as rt
from pyew.bench import benchlib, cli, harness, peers, report, suite_numpy, targets
from pyew.bench.harness import Run, map_cases
from pyew.bench.suites import SUITES
from pyew.errors import CudaError

from . import reference

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "libew" / "ops.toml"


def fake_manifest(raw: dict, fn_for=None) -> library.Manifest:
    """library.Manifest of a generator manifest; fn_for(op, kernel, entry) gives each entry's callable."""
    fn_for = fn_for or (lambda o, k, e: (lambda *a: 0))

    def make(cls, **kw):
        return cls(**{f.name: kw[f.name] for f in dataclasses.fields(cls) if f.name in kw})
    ops = []
    for o in raw["ops"]:
        kernels = tuple(make(library.Kernel, dtype=dt.BY_NAME[k["dtype"]], out_dtype=dt.BY_NAME[k["out_dtype"]],
                             paired=bool(k.get("paired")),
                             in_dtypes=tuple(dt.BY_NAME[d] for d in k.get("in_dtypes", ())),
                             entries=tuple(library.Entry(e["role"], e["symbol"], tuple(map(tuple, e["args"])),
                                                         fn_for(o, k, e)) for e in k["entries"]))
                        for k in o["kernels"])
        ops.append(make(library.Op, **(o | {"inputs": tuple(o["inputs"]), "kernels": kernels, "fixed": {},
                                           "params": tuple(library.Param(p["name"], p["type"], p["default"])
                                                           for p in o["params"])})))
    return library.Manifest(abi=raw["abi"], spec_files=(), build_command="make all", ops=tuple(ops), raw=raw)


@pytest.fixture(scope="module")
def spec_raw():
    return make_manifest(load([SPEC]))


@pytest.fixture(scope="module")
def cases(spec_raw):
    return {(c.name, c.dtype): c for c in map_cases(fake_manifest(spec_raw))}


# ---- options -----------------------------------------------------------------------------------

def test_parse_sizes():
    assert cli.parse_sizes("16:28") == [1 << e for e in range(16, 29)]
    assert cli.parse_sizes("16:28:4") == [1 << 16, 1 << 20, 1 << 24, 1 << 28]
    assert cli.parse_sizes("20,2^24,16-17") == [1 << 16, 1 << 17, 1 << 20, 1 << 24]
    assert cli.parse_sizes("1000,20") == [1000, 1 << 20]                 # > 40: an element count
    for bad in ("abc", "28:16", "16:20:0", "16:20:2:1", "", "2^40"):
        with pytest.raises(argparse.ArgumentTypeError):
            cli.parse_sizes(bad)


def test_the_pageable_floor_counts_staged_bytes_over_the_host_copy_and_all_over_pcie():
    """The floor of a numpy call: its bytes over PCIe both ways, or the bytes it stages (its inputs,
    and a result too small for the pinned pool) over the host's copy rate, whichever is longer."""
    run = types.SimpleNamespace(rows=[{"suite": "pcie", "name": "pinned both ways", "gbps": 100.0},
                                      {"suite": "pcie", "name": "host copy into pinned", "gbps": 40.0}])
    n = 1 << 20                                  # float32 sigmoid: 4 MiB in, 4 MiB out (pooled)
    staged = suite_numpy.staged_bytes(4 * n, 4 * n)
    assert staged == 4 * n
    assert suite_numpy.floor_ms(run, 8 * n, staged) == pytest.approx(4 * n / 40e6)
    assert suite_numpy.staged_bytes(64, 64) == 128                # a 64-byte result is staged
    fast_host = types.SimpleNamespace(rows=[dict(run.rows[0]), dict(run.rows[1], gbps=400.0)])
    assert suite_numpy.floor_ms(fast_host, 8 * n, staged) == pytest.approx(8 * n / 100e6)   # PCIe-bound
    assert suite_numpy.floor_ms(types.SimpleNamespace(rows=run.rows[:1]), 8 * n, staged) is None


def test_parse_args():
    a = cli.parse_args([])
    assert a.sizes == [1 << e for e in range(16, 29)] and a.repeat == cli.DEFAULT_REPEAT and not a.sizes_given
    assert a.suites == list(SUITES) and a.peers == ["torch", "cupy", "numpy", "numexpr"]
    assert a.out == Path("bench-out") and a.max_time == cli.DEFAULT_MAX_TIME and not a.sustained
    q = cli.parse_args(["--quick", "--suites", "map,copy", "--dtypes", "half,f32", "--ops", "gelu,add",
                        "--peers", "none"])
    assert q.sizes == [1 << 16, 1 << 20, 1 << 24, 1 << 28] and q.repeat == cli.QUICK_REPEAT
    assert q.suites == ["copy", "map"] and q.peers == [] and q.ops == ["gelu", "add"]      # in run order
    assert q.dtypes == ["float16", "bfloat16", "float32"]
    s = cli.parse_args(["--sustained", "--sustained-seconds", "2.5", "--numpy-sizes", "20,26", "--numpy-repeat",
                        "7", "--cpu-peers-max", "28", "--sizes=20:24"])
    assert s.sustained_seconds == 2.5 and s.numpy_sizes == [1 << 20, 1 << 26] and s.numpy_repeat == 7
    assert s.cpu_peers_max == 1 << 28 and s.sizes_given
    ns = lambda argv: suite_numpy.numpy_sizes(cli.parse_args(argv))        # noqa: E731
    assert ns([]) == [1 << 26, 1 << 20, 1 << 24, 1 << 28]                  # the targets' size first
    assert ns(["--quick"]) == [1 << 20, 1 << 24] and ns(["--sizes", "22:26"]) == [1 << 26, 1 << 24]
    assert ns(["--sizes", "10,12"]) == [] and ns(["--sizes", "10,12", "--numpy-sizes", "12"]) == [1 << 12]


@pytest.mark.parametrize("argv", [["--suites", "nope"], ["--dtypes", "float8"], ["--repeat", "0"], ["--sizes", "x"],
                                  ["--sustained-seconds", "0"], ["--numpy-repeat", "0"], ["--cpu-peers-max", "20,24"],
                                  ["--suites", ","], ["--ops", ","], ["--dtypes", ","], ["--seed", "-1"],
                                  ["--max-time", "nan"], ["--max-time", "-1"], ["--peers", "torc"],
                                  ["--sizes", "2^99999999999"]])
def test_parse_args_rejects(argv, capsys):
    with pytest.raises(SystemExit) as e:
        cli.parse_args(argv)
    assert e.value.code == 2


@pytest.mark.parametrize("argv,said", [(["--gpus", ","], "--gpus: GPU counts of at least 1"),
                                       (["--gpus", "0,1"], "--gpus: GPU counts"), (["--threads", "0"], "--threads"),
                                       (["--elements", "100"], "--elements must be at least 4096"),
                                       (["--elements", "10**999999999"], "not a count of at most 2**64"),
                                       (["--elements", "2**-3"], "not a count of at most 2**64")])
def test_bench_dask_rejects_before_it_runs(argv, said, capsys):
    from pyew.bench import dask_scaling
    with pytest.raises(SystemExit) as e:
        dask_scaling.main(argv)
    assert e.value.code == 2 and said in capsys.readouterr().err


def test_a_bad_out_folder_and_too_few_numpy_runs_fail_before_any_suite(tmp_path, capsys):
    f = tmp_path / "a file"
    f.write_text("")
    for argv, said in ((["--out", str(f)], "not a folder"), (["--out", str(f / "sub")], "cannot be made"),
                       (["--numpy-repeat", "2"], "--numpy-repeat must be at least 3")):
        with pytest.raises(SystemExit):
            cli.parse_args(argv)
        assert said in capsys.readouterr().err
    assert cli.parse_args(["--out", str(tmp_path / "new" / "folder")]).out == tmp_path / "new" / "folder"


def test_suites_and_help(cases):
    assert list(SUITES) == ["copy", "template", "dot", "upsample", "relu_mask", "layouts", "overhead", "interop",
                            "firstcall", "fusion", "numpy", "map"]
    man = types.SimpleNamespace(ops=[c.op for c in cases.values()])
    with pytest.raises(SystemExit) as e:
        cli.check_ops(cli.parse_args(["--ops", "gelu,nosuch"]), man)
    assert e.value.code == 2       # a usage error, as argparse's
    cli.check_ops(cli.parse_args(["--ops", "gelu"]), man)
    r = subprocess.run([sys.executable, "-m", "pyew", "bench", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for word in ("--sizes", "--sustained-seconds", "--numpy-sizes", "--cpu-peers-max", "--no-png", *SUITES):
        assert word in r.stdout, word
    r = subprocess.run([sys.executable, "-m", "pyew", "bench-dask", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0 and "--in-flight" in r.stdout


# ---- peers: derived from each op's name and spec ----------------------------------------------------

def test_missing_peers_are_skipped_with_a_note(monkeypatch):
    for name in ("torch", "cupy", "numexpr"):
        monkeypatch.setitem(sys.modules, name, None)       # import -> ImportError
    notes = []
    got = peers.load(["torch", "cupy", "numexpr", "numpy", "jax"], notes.append)
    assert list(got) == ["numpy"]
    assert all(any(n.startswith(f"{p} skipped: ModuleNotFoundError") for n in notes) for p in ("torch", "cupy"))
    assert any("unknown peer 'jax'" in n for n in notes)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=bool)))
    assert peers.load(["torch"], notes.append) == {} and "torch sees no GPU" in notes[-1]


class FakeTorch:
    """torch's namespaces as far as the bench looks them up; every call is recorded."""

    def __init__(self, missing=()):
        self.calls, self.missing = [], set(missing)
        self.bfloat16, self.float32, self.float16 = "bf16", "f32", "f16"

    def __getattr__(self, name):
        if name in self.missing:
            raise AttributeError(name)
        return FakeTorch.Fn(self, name)

    class Fn:
        def __init__(self, torch, path):
            self.torch, self.path = torch, path

        def __getattr__(self, name):
            if f"{self.path}.{name}" in self.torch.missing:
                raise AttributeError(name)
            return FakeTorch.Fn(self.torch, f"{self.path}.{name}")

        def __call__(self, *args, **kw):
            if "out" in kw and self.path in self.torch.missing:
                raise TypeError("no out=")
            self.torch.calls.append((self.path, args, kw))
            return ("result of", self.path)


def test_torch_counterparts_by_name(cases):
    t = FakeTorch(missing={"elu", "special.elu"})
    peer = peers.TorchPeer("torch", t)
    fn, _ = peer.op(cases[("elu", "float32")])               # torch.nn.functional.elu(x, alpha)
    fn("x")
    assert t.calls[-1] == ("nn.functional.elu", ("x", 1.0), {})
    peer.op(cases[("gelu_tanh", "float16")])[0]("x")           # a name torch spells otherwise
    assert t.calls[-1] == ("gelu", ("x",), {"approximate": "tanh"})
    peer.op(cases[("sigmoid", "float32")])[0]("x")
    assert t.calls[-1][0] == "sigmoid"
    cast, _ = peer.op(cases[("to_float16", "float32")])
    x = mock.MagicMock()
    cast(x)
    x.to.assert_called_once_with("f16")
    t2 = FakeTorch(missing={"nope_op", "special.nope_op", "nn.functional.nope_op"})
    op = types.SimpleNamespace(name="nope_op", inputs=("x",), out=None, ref="x", params=())
    fn, why = peers.TorchPeer("torch", t2).op(harness.MapCase(op, "float32", "float32", None, ("float32",)))
    assert fn is None and "TORCH_NAMES" in why and "nope_op" in why


def test_torch_writes_into_pyews_buffer(cases):
    t = FakeTorch(missing={"_C._nn.sigmoid"})                    # no _C._nn form: torch.sigmoid(out=)
    peer = peers.TorchPeer("torch", t)
    into = peer.into(cases[("sigmoid", "float32")])
    into("x", out="o")
    assert t.calls[-1] == ("sigmoid", ("x",), {"out": "o"})
    assert peer.into(cases[("sigmoid", "float32")]) is into     # probed once
    peer.into(cases[("gelu", "float32")])("x", out="o")          # the first form that takes out=
    assert t.calls[-1] == ("_C._nn.gelu", ("x",), {"out": "o"})
    peer.into(cases[("relu", "float16")])("x", out="o")
    assert t.calls[-1] == ("clamp_min", ("x", 0), {"out": "o"})
    out = mock.MagicMock()
    peer.into(cases[("to_float32", "float16")])("x", out=out)
    out.copy_.assert_called_once_with("x")
    none = FakeTorch(missing={"_C._nn.sigmoid", "sigmoid", "ops.aten.sigmoid.out"})
    assert peers.TorchPeer("torch", none).into(cases[("sigmoid", "float32")]) is None    # allocates instead


def test_cupy_fuses_the_ref(cases):
    cp = mock.MagicMock()
    peer = peers.CupyPeer("cupy", cp)
    fn, _ = peer.op(cases[("hardswish", "float16")])
    assert fn is cp.fuse.return_value.return_value
    assert cp.fuse.call_args.kwargs == {"kernel_name": "pyew_bench_hardswish"}
    traced = cp.fuse.return_value.call_args.args[0]         # the function CuPy traces, run here on numpy
    cp.where, cp.exp = np.where, np.exp
    got = traced(np.array([-4.0, 1.0, 4.0], np.float16))
    assert got.dtype == np.float16 and np.allclose(got.astype(float), [0, 4 / 6, 4], atol=1e-3)
    assert peer.op(cases[("gelu", "bfloat16")])[0] is None and "bfloat16" in peer.op(cases[("gelu", "bfloat16")])[1]
    cast, _ = peer.op(cases[("to_float16", "float32")])
    x = mock.MagicMock()
    cast(x)
    x.astype.assert_called_once_with("float16")


def test_numpy_peer_in_the_inputs_dtype(cases):
    pytest.importorskip("scipy", reason="scipy gives the numpy peer erf/erfc")
    peer, rng = peers.NumpyPeer("numpy", np), np.random.default_rng(3)
    seen = set()
    for c in [c for c in cases.values() if c.dtype in ("float32", "float16") and c.default]:
        fn, why = peer.op(c)
        assert fn is not None, why
        xs = [harness.random_host(rng, d, 257) for d in c.ins]
        got = fn(*xs)
        assert got.dtype == dt.BY_NAME[c.out_dtype].np and got.shape == (257,), c.label
        assert not any(np.shares_memory(got, x) for x in xs), c.label               # a new array, as the op's
        want = reference.evaluate(c.op.ref, c.op.inputs, xs, c.params, dt.BY_NAME[c.dtype])
        tol = 1e-5 if c.dtype == "float32" and c.out_dtype in ("float32", "float64") else 2e-2
        if c.out_dtype != "bool":
            with np.errstate(all="ignore"):
                np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol, err_msg=c.label)
        seen.add(c.name)
    assert {"gelu", "sigmoid", "add", "to_float16", "scale"} <= seen
    weak = peers._Weak(np)
    assert isinstance(weak.sqrt(2), float) and weak.sqrt(np.float32(4)).dtype == np.float32


def test_numpy_peer_without_scipy(cases, monkeypatch):
    monkeypatch.setitem(sys.modules, "scipy", None)
    monkeypatch.setitem(sys.modules, "scipy.special", None)
    fn, why = peers.NumpyPeer("numpy", np).op(cases[("gelu", "float32")])
    assert fn is None and "scipy" in why
    assert peers.NumpyPeer("numpy", np).op(cases[("sigmoid", "float32")])[0] is not None


def test_numexpr_expressions_from_the_ref(cases):
    seen = {}
    ne = types.SimpleNamespace(evaluate=lambda expr, local_dict: seen.setdefault("call", (expr, local_dict))
                               and np.zeros(1, np.float32))
    peer = peers.NumexprPeer("numexpr", ne)
    assert peer.op(cases[("hardshrink", "float32")])[0] is not None
    expr, local = seen.pop("call")
    assert expr == "where((x >= -lambd) & (x <= lambd), k0, x)" and local["lambd"].dtype == np.float32
    assert local["k0"].dtype == np.float32                       # a double would promote float32
    peer.op(cases[("relu", "float32")])
    assert seen.pop("call")[0] == "where(x >= k0, x, k0)"     # np.maximum: numexpr has none
    peer.op(cases[("sigmoid", "float32")])
    assert seen.pop("call")[0] == "k0 / (k1 + exp(-x))"
    assert peer.op(cases[("relu", "float16")])[0] is None       # no 16-bit floats
    assert peer.op(cases[("to_float64", "float32")])[0] is None
    real = pytest.importorskip("numexpr")
    derived, rng = [], np.random.default_rng(4)
    for c in [c for c in cases.values() if c.dtype == "float32"]:
        fn, why = peers.NumexprPeer("numexpr", real).op(c)
        if fn is None:
            continue
        xs = [harness.random_host(rng, d, 300) for d in c.ins]
        got, want = fn(*xs), reference.evaluate(c.op.ref, c.op.inputs, xs, c.params, dt.BY_NAME["float32"])
        assert got.dtype in (np.float32, np.bool_), c.label                  # no promotion to float64
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-4, atol=1e-5, equal_nan=True, err_msg=c.label)
        derived.append(c.name)
    assert {"relu", "sigmoid", "hardswish", "add", "maximum", "greater"} <= set(derived)
    assert peers.NumexprPeer("numexpr", real).op(cases[("gelu", "float32")])[0] is None      # no erfc


# ---- clocks, data, the run's bookkeeping ------------------------------------------------------------

class ClockEvent:
    """rt.Event on a fake GPU clock."""
    now = [0.0]

    def __init__(self, timing=False):
        self.t = None

    def record(self, stream_cu):
        self.t = ClockEvent.now[0]

    def synchronize(self):
        pass

    def elapsed_ms(self, start):
        return self.t - start.t


def test_gpu_timer_on_simulated_events(monkeypatch):
    """Each call 'takes' 3 ms of GPU time, each prefill memset 0.1 ms; a slow call gets fewer reps
    within the budget, and the calls rotate through every buffer set."""
    now = ClockEvent.now
    now[0] = 0.0
    monkeypatch.setattr(rt, "Event", ClockEvent)
    monkeypatch.setattr(rt, "memset", lambda *a: now.__setitem__(0, now[0] + 0.1))
    monkeypatch.setattr(rt, "malloc", lambda n, s: 1 << 20)
    monkeypatch.setattr(rt, "free", lambda *a: None)
    monkeypatch.setattr(rt, "synchronize", lambda: None)
    timer, seen = harness.GpuTimer(max_reps=16), []
    assert timer.busy_ms == pytest.approx(0.1)

    def call(i):
        now[0] += 3.0
        seen.append(i)
        return 0
    calls = [lambda i=i: call(i) for i in range(3)]
    t = timer.measure(calls, reps=25, warmup=2, check=lambda rc: None)
    assert t["reps"] == 16 and t["ms"] == pytest.approx(3.0) and set(seen) == {0, 1, 2}
    assert timer.measure(calls, reps=10, warmup=1, budget_ms=10.0)["reps"] == 3
    with pytest.raises(AssertionError):
        timer.measure(calls, reps=2, check=lambda rc: (_ for _ in ()).throw(AssertionError("rc")))
    timer.close()
    wall = [0.0]
    monkeypatch.setattr(rt, "DEFAULT_STREAM", types.SimpleNamespace(cu=0))

    def step(i):
        now[0] += 2.0
        wall[0] += 0.002
        return 0
    count, ms = harness.sustained([lambda: step(0), lambda: step(1)], 0.1, 5, lambda r: None, clock=lambda: wall[0])
    assert count == 50 and ms == pytest.approx(100.0)


def test_host_clock():
    now, cost = [0.0], [0.5]

    def fn():
        now[0] += cost[0]
    t = harness.host(fn, budget_s=1.0, repeats=5, clock=lambda: now[0])        # slow: one call a run, 3 runs
    assert t["calls"] == 3 and t["ms"] == pytest.approx(500.0)
    cost[0] = 1e-5
    t = harness.host(fn, budget_s=0.01, repeats=4, clock=lambda: now[0])
    assert t["us_per_call"] == pytest.approx(10.0, rel=1e-6) and 4 * 240 <= t["calls"] <= 4 * 250


def test_random_data_and_bytes(cases):
    rng = np.random.default_rng(1)
    for name in dt.BY_NAME:
        v = harness.random_host(rng, name, 4096)
        nonzero = (v.astype(np.float64) != 0).mean()
        assert v.dtype == dt.BY_NAME[name].np and nonzero > (0.4 if name == "bool" else 1 - 1e-9)
    with mock.patch.object(harness, "BLOCK", 1000):
        t = harness.random_host_n(rng, "float16", 4500)
    assert t.size == 4500 and np.array_equal(t[1000:2000], t[:1000]) and np.array_equal(t[4000:], t[:500])
    assert harness.stride(1) == 256 and harness.stride(257) == 512
    assert harness.rotation_slots(1 << 30, 50 << 20, 100) == 1
    assert harness.rotation_slots(1 << 20, 50 << 20, 1000) == 200
    assert cases[("add", "float32")].bytes(1000) == 12000 and cases[("to_float32", "float16")].bytes(1000) == 6000
    assert cases[("scale", "float32")].params == {"alpha": 1.5}           # a param without a default: the bench's
    assert harness.nbytes_of(np.zeros(10, np.float32), (np.zeros(3), None), [np.zeros(10, np.float32)]) == 104


def test_progress_time_limit_and_failures():
    buf, now = io.StringIO(), [0.0]
    run = Run(types.SimpleNamespace(max_time=10.0), buf, clock=lambda: now[0])
    run.every = 5.0
    run.status("first")
    run.status("second")               # within `every`: not written
    run.status("third", force=True)
    run.note("a note")
    run.note("a note")                 # once
    assert [ln.split("] ")[-1] for ln in buf.getvalue().splitlines()] == [
        ": first (0 measured)", ": third (0 measured)", "note: a note"]
    now[0] = 7.0
    run.suite = "numpy"
    assert run.out_of_time(4.0, "the map sweep") and run.out_of_time(4.0, "the map sweep") and not run.out_of_time()
    assert len([n for n in run.notes if "for the map sweep" in n]) == 1
    now[0] = 11.0
    assert run.out_of_time() and len([n for n in run.notes if "past --max-time" in n]) == 1
    run.max_time = None
    assert run.measure("s", "op", "float32", 8, "pyew", lambda: {"ms": 2.0}, bytes=4e6)["gbps"] == pytest.approx(2.0)
    assert run.measure("s", "op", "float32", 8, "pyew", lambda: {"ms": 1.0}) is None          # measured already
    assert run.measure("s", "op", "float32", 8, "torch", lambda: None) is None and len(run.rows) == 1
    run.measure("s", "op", "float32", 8, "cupy", lambda: 1 / 0)
    assert "s: cupy op float32 n=8 failed: ZeroDivisionError" in run.notes[-1]
    err = CudaError(700, "cudaErrorIllegalAddress", "ew_gelu_f32")
    with pytest.raises(harness.StopRun):
        run.measure("s", "op", "float32", 8, "naive", lambda: (_ for _ in ()).throw(err))


# ---- report and targets --------------------------------------------------------------------------------

def rows():
    n, out = 1 << 28, [{"suite": "copy", "name": "memcpy D2D", "dtype": None, "n": 1 << 30, "impl": "cudaMemcpyAsync",
                        "ms": 1.0, "bytes": 3e9, "gbps": 3000.0}]

    def add(suite, name, dtype, impl, size=n, **kw):
        row = {"suite": suite, "name": name, "dtype": dtype, "n": size, "impl": impl} | kw
        if "bytes" in row:
            row["gbps"] = row["bytes"] / (row["ms"] * 1e6)
            row["pct_copy"] = row["gbps"] / 30
        out.append(row)
    for impl, ms in (("pyew", 0.7), ("naive", 1.5), ("torch", 0.9), ("cupy", 1.4)):
        add("map", "gelu", "float16", impl, ms=ms, bytes=n * 4, arity=1, out_dtype="float16", tuning="compute")
        add("map", "gelu", "float16", impl, size=n >> 2, ms=ms / 4, bytes=n, arity=1, out_dtype="float16")
    for impl, ms in (("pyew", 1.0), ("torch", 1.1)):
        add("map", "mul", "float16", impl, ms=ms, bytes=n * 6, arity=2, out_dtype="float16")
    for impl, ms in (("pyew", 0.5), ("torch", 1.0)):
        add("map", "to_float32", "float16", impl, ms=ms, bytes=n * 6, arity=1, out_dtype="float32")
    for impl, ms in (("fast", 0.1), ("half_atomic", 4000.0), ("torch", 0.12)):
        add("dot", "dot", "float16", impl, size=1 << 24, ms=ms, bytes=4 << 24)
    for impl, us in (("pyew", 3.5), ("torch", 5.0)):
        add("overhead", "add", "float32", impl, size=1, us_per_call=us)
    for impl, ms in (("pyew", 0.4), ("torch", 1.0)):
        add("upsample", "forward", "float32", impl, size=100, ms=ms, bytes=2000, shape=[1, 1, 10, 10])
    for name, impl, ms in (("sigmoid", "pyew", 18.0), ("sigmoid", "numexpr", 30.0), ("relu", "pyew", 17.0),
                           ("relu", "numexpr", 16.0), ("add", "pyew", 26.0)):
        add("numpy", name, "float32", impl, size=1 << 26, ms=ms, bytes=8 << 26, arity=1 + (name == "add"),
            default=True, floor_ms=13.4 if impl == "pyew" else None)
    for impl, us, foreign in (("DeviceArray", 7.0, 0), ("torch", 10.0, 2), ("cupy + DeviceArray", 10.0, 1)):
        add("interop", "pyew.add", "float32", impl, size=1, us_per_call=us, foreign=foreign,
            extra_us=(us - 7.0) / foreign if foreign else None)
    for k, one, st in ((1 << 8, 30.0, 60.0), (1 << 12, 40.0, 62.0), (1 << 14, 90.0, 70.0), (1 << 16, 200.0, 100.0)):
        add("crossover", "sigmoid", "float32", "one shot", size=k, us_per_call=one)
        add("crossover", "sigmoid", "float32", "streamed", size=k, us_per_call=st)
    for off, (mine, theirs) in enumerate(((1.0, 1.01), (1.02, 1.0), (1.01, 1.03))):
        for impl, ms in (("pyew", mine), ("torch", theirs)):
            add("layouts", f"relu view +{off}", "float16", impl, size=1 << 26, ms=ms, bytes=1 << 28, op="relu",
                offset=off, pct_aligned=100 / ms if off else None)
    return out


META = {"date": "2026-01-01", "command": "python -m pyew bench", "seed": 1, "map_order": [["mul", "float16"]],
        "device": {"name": "Test GPU", "sms": 132, "l2_bytes": 50 << 20, "capability": [9, 0]}}


def _cells(text, start):
    line = next(ln for ln in text.splitlines() if ln.startswith(start))
    return [c.strip() for c in line.strip("|").split("|")]


def test_report_tables():
    text = report.render(rows(), 3000.0, META, ["torch skipped: test"])
    for block in text.split("\n\n"):                  # every table rectangular
        assert len({ln.count("|") for ln in block.splitlines() if ln.startswith("|")}) <= 1, block
    head = text.split("## Map ops at the largest size")[1]
    assert head.index("| mul |") < head.index("| gelu |")                 # the library's order first
    # op, dtype, n, GB/s and % copy per impl, vs PyTorch, vs CuPy, tuning
    assert _cells(head, "| gelu | float16")[3:] == ["1534", "51.1%", "1193", "39.8%", "767", "25.6%", "1.29x", "2.00x",
                                                     "compute"]
    assert _cells(text.split("## Naive vs template")[1], "| gelu")[-1] == "2.14x"
    assert "| 2^26 | 2^28 |" in text.split("## pyew by size")[1]
    assert _cells(text.split("## pyew.dot")[1], "| dot")[-2:] == ["40000.00x", "1.20x"]
    assert _cells(text.split("## Interop")[1], "| pyew.add")[3:] == ["7.00", "—", "10.00", "+1.50", "10.00", "+3.00",
                                                                     "1.43x", "1.43x"]
    assert _cells(text.split("## Crossover")[1], "| sigmoid | float32 | 2^14")[3:] == ["90.00", "70.00", "0.78x"]
    assert _cells(text.split("## Views offset")[1], "| relu view +1")[2:] == ["263", "268", "0.980x", "98.0%"]
    assert "- torch skipped: test" in text
    assert report.render([], None, META, []).count("## ") == 1                   # the targets alone


def test_targets():
    items = {t["target"]: t for t in targets.evaluate(rows())}
    assert list(items) == [c[0] for c in targets.CHECKS] and len(items) == 31
    by = lambda s: next(v for k, v in items.items() if k.startswith(s))   # noqa: E731
    assert by("cast f16->f32")["met"] is True and by("template >= 2x")["met"] is True
    assert by("binary ops")["met"] is True and by("host time per call")["met"] is True
    assert by("upsample 2x forward")["met"] is True
    assert by("pyew.dot")["met"] is True and by("dot: fast")["met"] is True
    assert by(">= 1.7x CuPy")["met"] is None and by(">= 3.4x CuPy")["met"] is False     # gelu f16: 2.0x
    assert by("numpy in/out: sigmoid")["met"] is False and by("numpy in/out: add")["met"] is None
    assert by("numpy in/out: every one-input")["met"] is False and "relu" in by("numpy in/out: every")["measured"]
    assert by("a torch operand")["met"] is False and by("a CuPy operand")["met"] is False
    one_input = by("numpy in/out: no one-input op")
    assert one_input["met"] is True and "1.059x" in one_input["measured"]
    assert by("numpy in/out: sigmoid and add float32 from")["met"] is None
    assert by("numpy in/out: sigmoid and add float32 faster")["met"] is None
    assert by("small calls")["met"] is None
    assert by("unary ops")["met"] is False and "gelu float16" in by("unary ops")["measured"]
    assert by("views offset")["met"] is False and "min 0.980x (relu view +1 float16)" in by("views offset")["measured"]
    assert all(t["met"] is None for t in targets.evaluate([]))


def test_json_and_png(tmp_path, monkeypatch):
    bad = rows() + [{"suite": "map", "name": "x", "dtype": "float32", "n": 2, "impl": "pyew", "ms": float("nan")}]
    paths = report.write_all(tmp_path, bad, 3000.0, META, ["a note"], png=False)
    doc = json.loads(paths["json"].read_text())
    assert doc["notes"] == ["a note"] and doc["rows"][-1]["ms"] is None and len(doc["targets"]) == 31
    assert paths["table"].read_text().startswith("# pyew benchmark: Test GPU")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    paths = report.write_all(tmp_path, rows(), 3000.0, META, [], png=True)
    assert "png" not in paths and "matplotlib" in json.loads(paths["json"].read_text())["notes"][-1]


def test_png(tmp_path):
    pytest.importorskip("matplotlib")
    assert report.write_all(tmp_path, rows(), 3000.0, META, [])["png"].read_bytes()[:4] == b"\x89PNG"


# ---- the benchmark library: what only the benchmark compares, out of libew.so ------------------------

def test_library_sources_hold_no_comparison_kernels(tmp_path, spec_raw):
    for op in spec_raw["ops"]:
        roles = {e["role"] for k in op["kernels"] for e in k["entries"]}
        assert not roles & {"naive", "half_atomic", "half2_pack"}, op["name"]
    generate(load([SPEC]), tmp_path)
    gen = tmp_path / "gen"
    # (the manifest's unit names every source the library was built from, naive.cuh among them)
    assert not any("naive" in p.read_text() or "dot_atomics" in p.read_text() for p in gen.glob("*.cu")
                   if p.name != "ew_manifest.cu")
    assert not (gen / "bench").exists()


def test_benchmark_library_sources(tmp_path):
    spec = load([SPEC])
    generate(spec, tmp_path)
    counts = generate_bench(spec, tmp_path, ["mul"])
    bench = tmp_path / "gen" / "bench"
    mul = (bench / "ew_mul_f16.cu").read_text()
    assert "EW_API int ew_naive_mul_f16(" in mul and "ew::launch_naive(" in mul and "launch_map<" not in mul
    dot = (bench / "ew_dot_bf16.cu").read_text()
    assert "ew_dot_half2_pack_bf16(" in dot and "ew_dot_half_atomic_bf16(" in dot and "ew_dot_fast" not in dot
    assert not (bench / "ew_dot_f32.cu").exists() and not (bench / "ew_gelu_f32.cu").exists()
    mk = (bench / "sources.mk").read_text()
    assert "BENCH_SOURCES :=" in mk and "$(BUILD)/gen/bench/ew_bench_manifest.cu" in mk
    text = (bench / "ew_bench_manifest.cu").read_text()
    table = json.loads(text[text.index("R\"EW_MANIFEST(") + 14:text.index(")EW_MANIFEST\"")])
    assert {(e["op"], e["role"]) for e in table["entries"]} == {("mul", "naive"), ("dot", "half_atomic"),
                                                                ("dot", "half2_pack")}
    assert table["spec_files"] == [{"path": f.path, "sha256": f.sha256} for f in spec.files]
    assert generate_bench(spec, tmp_path, ["mul"])["written"] == 0 and counts["written"] > 0
    generate_bench(spec, tmp_path, ["sub"])                       # mul's sources go with it
    assert not (bench / "ew_mul_f16.cu").exists() and (bench / "ew_sub_f16.cu").exists()
    with pytest.raises(GeneratorError, match="BENCH_NAIVE names nosuch, not a map op"):
        generate_bench(spec, tmp_path, ["nosuch"])


def test_generator_command_line_renders_the_benchmark_library(tmp_path):
    r = subprocess.run([sys.executable, "-m", "generator", "--out", str(tmp_path), str(SPEC), "--bench", "mul,add"],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0 and "benchmark library" in r.stdout, r.stderr
    assert (tmp_path / "gen" / "bench" / "ew_add_f32.cu").exists()
    r = subprocess.run([sys.executable, "-m", "generator", "--out", str(tmp_path), str(SPEC), "--bench", "nosuch"],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 1 and "BENCH_NAIVE names nosuch" in r.stderr


def test_built_library_exports_no_comparison_kernels():
    lib = library.library_path()
    if not lib.exists():
        pytest.skip(f"{lib} not built (make all)")
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
    exported = [ln.split()[-1] for ln in out.splitlines() if " T " in ln]
    assert exported and not [s for s in exported if s.startswith("ew_naive_") or "half_atomic" in s
                             or "half2_pack" in s]


def test_built_benchmark_library_loads():
    path = library.library_path().parent / "libew_bench.so"
    if not path.exists():
        pytest.skip(f"{path} not built (make bench-lib)")
    spec = load([SPEC])
    entries = benchlib.load(path, spec.files)
    assert ("mul", "float16", "naive") in entries and ("dot", "bfloat16", "half2_pack") in entries
    assert entries[("mul", "float32", "naive")][0] == "ew_naive_mul_f32"
    with pytest.raises(ValueError, match="other spec files than libew.so"):
        benchlib.load(path, [])


def test_host_rounds_take_turns_and_report_medians():
    """Host-time sides alternate round by round, so a host's drift falls on all of them; a side
    that fails is dropped with a note, the others still reported."""
    order, notes = [], []

    class Stub:
        def out_of_time(self, *a):
            return False

        def status(self, msg):
            pass

        def failed(self, what, e):
            notes.append(what)

    def side(name):
        def call():
            if not order or order[-1] != name:
                order.append(name)
        return call

    def broken():
        raise RuntimeError("peer failed")
    got = harness.host_rounds(Stub(), "overhead add", {"a": side("a"), "b": side("b"), "c": broken},
                              rounds=3, budget_s=0.003)
    assert order == ["a", "b"] * 3
    assert sorted(got) == ["a", "b"] and notes == ["overhead add: c"]
    for fig in got.values():
        assert fig["us_per_call"] > 0 and fig["min_ms"] <= fig["ms"] and fig["calls"] >= 3


def test_python_replay_turns_the_c_replay_off_for_its_block(monkeypatch):
    real = library.LIBEW_LAUNCH
    assert library.launch is real
    with harness.python_replay():
        inside = library.launch
    assert inside is not real and inside.__code__ is real.__code__ and library.launch is real
    stand_in = lambda *a: None          # noqa: E731
    monkeypatch.setattr(library, "launch", stand_in)
    with harness.python_replay():
        assert library.launch is stand_in     # a stand-in already keeps the C replay off
    assert library.launch is stand_in


def test_the_dask_bench_check_takes_float32_rounding_and_catches_wrong_results():
    """bench-dask's check of gelu(x * w + b): a float32 result with the sum rounded once (a fused
    formula) or each op rounded (op by op) passes, also where x w + b cancels and deep in gelu's
    tail (where a reference from 1 + erf rounds to 0); a result without the bias, off by 1e-3, or
    with its tail dropped, fails."""
    import math

    from pyew.bench import dask_scaling

    class Chunked(np.ndarray):            # a numpy array with a dask array's chunks
        chunks = ((256,), (64,))

    class Client:
        def compute(self, arrays, sync):
            return [np.asarray(a) for a in arrays]

    rng = np.random.default_rng(3)
    x = rng.standard_normal((256, 64)).astype(np.float32)
    w = rng.standard_normal(64).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    b[:8] = -(x[0, :8] * w[:8])                    # sums that cancel in row 0
    b[8:16] = -8.4 - x[0, 8:16] * w[8:16]           # and sums deep in the tail: gelu about -2e-16
    gelu = np.vectorize(lambda v: 0.5 * v * math.erfc(-v / math.sqrt(2)))
    fused = gelu((x.astype(np.float64) * w + b).astype(np.float32)).astype(np.float32)
    by_op = gelu(((x * w).astype(np.float32) + b).astype(np.float32)).astype(np.float32)
    xs = x.view(Chunked)
    for y in (fused, by_op):
        assert dask_scaling._check(Client(), y, xs, w, b, strict=True) < 1e-4
    tail = fused.copy()
    tail[x * w + b < -3] = 0                       # gelu's tail, where its slope is small, dropped
    assert (tail != fused).any()
    for wrong in (gelu(x * w).astype(np.float32), fused * np.float32(1 + 1e-3), tail):
        with pytest.raises(AssertionError, match="off by"):
            dask_scaling._check(Client(), wrong, xs, w, b, strict=True)


def test_faster_at_every_size_needs_the_peer_at_every_size():
    """A size where PyTorch's round trip was not measured leaves 'faster at every size' unmet, and
    the text names the size."""
    rows = [dict(suite="numpy", name="sigmoid", dtype="float32", n=n, impl=impl, ms=ms)
            for n, impl, ms in ((1 << 20, "pyew", 1.0), (1 << 20, "torch", 2.0), (1 << 20, "cupy", 2.0),
                                (1 << 28, "pyew", 9.0), (1 << 28, "cupy", 20.0))]
    got = {t["target"]: t for t in targets.evaluate(rows)}
    t = got["numpy in/out: sigmoid and add float32 faster than PyTorch's and CuPy's round trips at every size"]
    assert t["met"] is None and "no torch row at sigmoid float32 2^28" in t["measured"]
    rows.append(dict(suite="numpy", name="sigmoid", dtype="float32", n=1 << 28, impl="torch", ms=30.0))
    got = {t["target"]: t for t in targets.evaluate(rows)}
    assert got["numpy in/out: sigmoid and add float32 faster than PyTorch's and CuPy's round trips at every size"][
        "met"] is True


def test_one_input_ops_are_compared_with_those_moving_the_same_bytes():
    """A cast to float64 writes twice a float32 op's bytes: it is not an outlier of the float32 ops."""
    rows = [dict(suite="numpy", name=name, dtype="float32", out_dtype=out, n=1 << 26, impl="pyew", arity=1, ms=ms)
            for name, out, ms in (("sigmoid", "float32", 10.0), ("elu", "float32", 12.0),
                                  ("to_float64", "float64", 16.0))]
    t = next(t for t in targets.evaluate(rows) if t["target"].startswith("numpy in/out: no one-input op over 1.5x"))
    assert t["met"] is True and "1.20x" in t["measured"]
    rows[1]["ms"] = 16.0
    t = next(t for t in targets.evaluate(rows) if t["target"].startswith("numpy in/out: no one-input op over 1.5x"))
    assert t["met"] is False
