"""Whole benchmark runs on a simulated GPU: the runtime's CUDA calls faked (tests/fake_cuda.py:
"device" memory is host memory), a library whose map entry points compute the op's reference in
numpy on that memory, peers as mocks (their foreign GPU arrays as CUDA Array Interface objects over
fake device memory), GPU timing replaced. Every suite's code path runs end to end; no timing is
asserted."""
from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

pytest.importorskip("mako", reason="mako (the generator's template engine) is not installed")

from generator.render import manifest as make_manifest
from generator.spec import load
from pyew import dtypes as dt
from pyew import kinds, library, transfer
from pyew import runtime as rt
from pyew.bench import api_suites, cli, cpu_peers, host_suites, layout_suite, map_suites, numpy_suite, peers, timing
from pyew.bench.data import Pool
from pyew.bench.timing import Timing
from pyew.errors import CudaError

from . import reference
from .fake_cuda import device_view, install, one_gpu
from .test_bench import fake_manifest

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "libew" / "ops.toml"
SMS, TPSM = 132, 2048
LIMITS = {"pinned_bytes": 4 << 20, "device_bytes": 1 << 20, "threads": 2, "small_bytes": 16 << 10,
          "mode": "stage", "pinned_pool_bytes": 64 << 20}


class FakeLib:
    """The loaded library: map entries compute the op's ref (float64, rounded to the output dtype)
    on fake device memory; other kinds' entries only record their calls."""

    def __init__(self, raw):
        self.path = Path("/fake/libew.so")
        self.build_command = "make all"
        self.ext, self.calls_note = None, "a stand-in library"     # entries are Python functions
        self.calls = []
        self.broken: set[str] = set()
        self.fill = lambda *a: 0
        self.manifest = fake_manifest(raw, self._fn)

    def _fn(self, o, k, e):
        nargs, sym = len(e["args"]), e["symbol"]
        compute = o["kind"] == "map" and e["role"] in ("forward", "naive")

        def call(*args):
            assert len(args) == nargs, (sym, len(args), nargs)
            if sym in self.broken:
                raise CudaError(700, "cudaErrorIllegalAddress", sym)
            self.calls.append((sym, args))
            if compute:
                self._map(o, k, args)
            return 0
        return call

    @staticmethod
    def _map(o, k, args):
        arity = len(o["inputs"])
        out, ins, n = args[0], args[1:1 + arity], args[1 + arity]
        params = dict(zip([p["name"] for p in o["params"]], args[2 + arity:2 + arity + len(o["params"])]))
        d, od = dt.BY_NAME[k["dtype"]], dt.BY_NAME[k["out_dtype"]]
        xs = [device_view(p, d.np, (n,)) for p in ins]
        want = reference.evaluate(o["ref"], o["inputs"], xs, params, d)
        device_view(out, od.np, (n,))[...] = want.astype(od.np)

    def check(self, rc, where):
        assert rc == 0, where

    def error_name(self, code):
        return "fake"


class TimedEvent:
    """rt.Event whose times are the host's (every fake copy and kernel runs at once)."""

    def __init__(self, timing=False):
        self.t = 0.0

    def record(self, stream_cu):
        self.t = time.perf_counter()

    def synchronize(self):
        pass

    def done(self):
        return True

    def elapsed_ms(self, start):
        return max((self.t - start.t) * 1e3, 1e-4)


class FakeTimer:
    def __init__(self, max_reps=256):
        self.count = 0

    def measure(self, calls, reps, warmup=2, budget_ms=2000.0, check=None):
        for c in calls:                     # every prepared call runs once: their arguments are valid
            r = c()
            if check is not None:
                check(r)
        self.count += 1
        t = 0.5 + (self.count % 5) / 10
        return Timing(t, t, t, reps)

    def close(self):
        pass


class ForeignArray:
    """A GPU array of another library: CUDA Array Interface v3 over fake device memory."""

    def __init__(self, fake, value, dtype=np.float32, n=1):
        self.dtype = np.dtype(dtype)
        self.ptr = fake.malloc(n * self.dtype.itemsize, None)
        self.n = n
        device_view(self.ptr, self.dtype, (n,))[...] = value

    @property
    def __cuda_array_interface__(self):
        return {"shape": (self.n,), "typestr": self.dtype.str, "data": (self.ptr, False), "version": 3,
                "strides": None, "stream": 1}


def _peer_module(fake):
    m = mock.MagicMock(__version__="fake")
    m.full.side_effect = lambda shape, value, dtype=None, device=None: ForeignArray(fake, value, np.float32, shape[0])
    return m


@pytest.fixture
def fake_gpu(monkeypatch, tmp_path):
    raw = make_manifest(load([SPEC]))
    lib = FakeLib(raw)
    fake = install(monkeypatch)
    dev = rt.DeviceProps(0, "Fake GPU", (9, 0), SMS, TPSM, 80 << 30, 1 << 20, None)
    info = {"ordinal": 0, "name": "Fake GPU", "capability": (9, 0), "sms": SMS, "threads_per_sm": TPSM,
            "l2_bytes": 1 << 20, "total_memory": 80 << 30, "free_memory": 70 << 30}
    one_gpu(monkeypatch, dev)
    monkeypatch.setattr(rt, "device_info", lambda: info)
    monkeypatch.setattr(rt, "synchronize", lambda: None)
    monkeypatch.setattr(rt, "trim_pool", lambda keep_bytes=0: None)
    monkeypatch.setattr(rt, "Event", TimedEvent)
    monkeypatch.setattr(library, "get", lambda: lib)
    monkeypatch.setattr(timing, "GpuTimer", FakeTimer)
    monkeypatch.setattr(peers, "LOADERS", dict(
        peers.LOADERS,
        torch=lambda: peers.TorchPeer("torch", _peer_module(fake)),
        cupy=lambda: peers.CupyPeer("cupy", _peer_module(fake))))
    monkeypatch.setattr(host_suites, "_spawn", lambda payload, env, timeout: {
        "first_us": 2500.0, "second_us": 40.0, "third_us": 35.0, "import_ms": 300.0, "setup_ms": 500.0,
        "primer_first_us": 9000.0 if payload[-1] else None, "module_loading": None})
    for mod, name, value in ((map_suites, "COPY_BYTES", 1 << 20), (api_suites, "UPSAMPLE_SHAPE", (1, 2, 8, 8)),
                             (api_suites, "RELU_MASK_SHAPE", (1, 2, 8, 8)),
                             (api_suites, "OVERHEAD_QUICK", (20, 2)), (host_suites, "INTEROP_QUICK", (20, 2)),
                             (numpy_suite, "BW_BYTES", 1 << 20), (numpy_suite, "RAW_BYTES", 1 << 20),
                             (numpy_suite, "COPY_THREADS", (1, 2)),
                             (numpy_suite, "CROSSOVER_SIZES", (1 << 8, 1 << 10, 1 << 12)),
                             (numpy_suite, "CROSSOVER_BUDGET_S", 0.005), (numpy_suite, "SMALL_BUDGET_S", 0.005),
                             (numpy_suite, "POINT_BUDGET_S", 0.005), (numpy_suite, "TRANSFER_SIZES", (1 << 12,)),
                             (layout_suite, "ROW_BIAS", ((16, 64), (64,))),
                             (layout_suite, "CHANNEL_BIAS", ((2, 4, 8, 8), (4, 1, 1))),
                             (layout_suite, "VIEW_N", 1 << 10)):
        monkeypatch.setattr(mod, name, value)
    old = transfer.set_transfer_limits(**LIMITS)
    kinds.reset()
    yield lib
    kinds.reset()
    transfer.release()
    transfer.set_transfer_limits(**old)
    transfer.release()


def _n_arg(sym_args, manifest):
    """The element count a map entry was called with (None for other kinds)."""
    sym, args = sym_args
    for op in manifest.ops:
        if op.kind == "map" and any(e.symbol == sym for k in op.kernels for e in k.entries):
            return args[1 + len(op.inputs)]
    return None


def test_simulated_run(fake_gpu, tmp_path, capsys):
    rc = cli.main(["--quick", "--sizes", "10,12", "--ops", "gelu,add,mul,to_float32,to_float16",
                   "--numpy-sizes", "10,12", "--cpu-peers-max", "12", "--sustained", "--sustained-seconds", "0.002",
                   "--out", str(tmp_path), "--no-png", "--max-time", "120"])
    assert rc == 0
    out, err = capsys.readouterr()
    doc = json.loads((tmp_path / "bench.json").read_text())
    rows = doc["rows"]
    keys = {(r["suite"], r["name"], r["dtype"], r["n"], r["impl"]) for r in rows}
    assert len(keys) == len(rows)                                              # nothing measured twice
    assert {r["suite"] for r in rows} >= {"copy", "map", "sustained", "dot", "upsample", "relu_mask", "overhead",
                                          "interop", "firstcall", "pcie", "small", "crossover", "transfer", "numpy"}
    # the map sweep and OneFlow's comparison
    for impl in ("pyew", "naive", "torch", "cupy"):
        assert ("map", "gelu", "float16", 1 << 12, impl) in keys
        assert ("map", "add", "int64", 1 << 10, impl) in keys
    assert ("map", "gelu", "bfloat16", 1 << 12, "torch") in keys
    assert ("map", "gelu", "bfloat16", 1 << 12, "cupy") not in keys          # CuPy: no bfloat16
    assert ("map", "mul", "float16", 1 << 12, "naive") in keys               # the template suite's row
    assert doc["copy_gbps"] and all("pct_copy" in r for r in rows if r["suite"] == "map")
    sym, args = next(c for c in fake_gpu.calls if c[0] == "ew_naive_mul_f32" and c[1][3] > 256)
    assert args[3] in (1 << 10, 1 << 12) and args[-3:] == (0, SMS, TPSM)
    # --sustained: both sides at the largest size, with the burst figure beside
    for impl in ("pyew", "torch"):
        r = next(r for r in rows if r["suite"] == "sustained" and r["name"] == "gelu" and r["dtype"] == "float16"
                 and r["impl"] == impl)
        assert r["n"] == 1 << 12 and r["calls"] > 0 and len(r["segment_gbps"]) == 2 and r["burst_gbps"]
    # every map kernel's first call is a warm-up on a tiny array, before anything is timed
    first = {}
    for c in fake_gpu.calls:
        first.setdefault(c[0], c)
    for sym, c in first.items():
        n = _n_arg(c, fake_gpu.manifest)
        assert n is None or n <= 256, (sym, n)
    # the numpy suite: every implementation, the floor, and pyew's answer checked against numpy's
    # gelu's numpy peer needs scipy's erf: without scipy it is skipped with a note
    for impl in ("pyew", "torch", "cupy") + (("numpy",) if cpu_peers.scipy_erf() is not None else ()):
        assert ("numpy", "gelu", "float16", 1 << 12, impl) in keys
    assert ("numpy", "add", "float16", 1 << 12, "numpy") in keys
    if importlib.util.find_spec("numexpr") is not None:                      # an optional peer
        assert ("numpy", "add", "float32", 1 << 10, "numexpr") in keys
    assert ("numpy", "gelu", "float32", 1 << 10, "numexpr") not in keys       # no erf in numexpr
    assert not any(k[0] == "numpy" and k[2] == "float16" and k[4] == "numexpr" for k in keys)
    assert ("numpy", "to_float16", "float32", 1 << 12, "pyew") in keys
    assert not any(k[0] == "numpy" and k[2] not in ("float32", "float16") for k in keys)
    p = next(r for r in rows if r["suite"] == "numpy" and r["name"] == "add" and r["impl"] == "pyew"
             and r["dtype"] == "float32" and r["n"] == 1 << 12)
    assert p["floor_kind"] == "both ways" and p["floor_ms"] > 0 and p["floor_ratio"] > 0
    assert p["bytes"] == 3 * 4 * (1 << 12) and p["arity"] == 2 and p["default"] is True
    for r in rows:
        if r["suite"] == "numpy" and r["impl"] == "pyew" and r["n"] == 1 << 10 and r["name"] != "gelu":
            tol = 1e-5 if r["dtype"] == "float32" and r["out_dtype"] != "float16" else 5e-2
            assert r["max_abs_diff_vs_numpy"] is not None and r["max_abs_diff_vs_numpy"] <= tol, r
    # pinned bandwidth, crossover, modes, raw costs, small calls
    assert {r["name"] for r in rows if r["suite"] == "pcie"} == {"pinned H2D", "pinned D2H", "pinned both ways"}
    assert {(r["n"], r["impl"]) for r in rows if r["suite"] == "crossover"} == {
        (n, m) for n in (1 << 8, 1 << 10, 1 << 12) for m in ("one shot", "streamed")}
    assert {(r["name"], r["impl"]) for r in rows if r["suite"] == "transfer" and r["dtype"]} == {
        (op, m) for op in ("sigmoid", "add") for m in ("stage", "register")}
    assert {r["impl"] for r in rows if r["suite"] == "transfer" and r["name"].startswith("np.copyto")} == {
        "1 threads", "2 threads"}
    assert {(r["name"], r["impl"]) for r in rows if r["suite"] == "small"} == {
        (op, i) for op in ("sigmoid", "add") for i in ("pyew", "torch", "cupy")}
    assert transfer.transfer_limits() == LIMITS                               # every change put back
    # interop and first calls
    inter = {r["impl"]: r for r in rows if r["suite"] == "interop" and r["name"] == "pyew.add"}
    assert set(inter) == {"DeviceArray", "torch", "torch + DeviceArray", "cupy", "cupy + DeviceArray"}
    assert inter["torch"]["foreign"] == 2 and inter["cupy + DeviceArray"]["foreign"] == 1
    fc = {r["name"]: r for r in rows if r["suite"] == "firstcall"}
    assert set(fc) == {"gelu", "add", "to_float16"} and fc["gelu"]["lazy_us"] == pytest.approx(2460.0)
    assert fc["gelu"]["primer"] == "add float64"
    # the report
    assert "## pyew's performance targets" in out and "## numpy in, numpy out" in out
    assert "## Crossover" in out and "Measured crossover" in out and "## Interop" in out
    assert "## Sustained" in out and "## First call" in out and "## Small calls" in out
    assert "== numpy" in err and "pinned bandwidth:" in err and "crossover:" in err
    assert (tmp_path / "bench.md").read_text() == out
    assert doc["meta"]["transfer_limits"] == LIMITS and doc["meta"]["cpu_count"]


def test_pool_views_rotate_inside_the_buffer(fake_gpu):
    p = Pool("float16", 1 << 12, span_bytes=1 << 20)          # 2^19 float16 elements: the span wins
    assert p.elems == 1 << 19 and p.capacity(1 << 12) == 128 and p.capacity(1000) == (1 << 19) // 1024
    base = p.array.ptr
    for slot in (0, 1, 127, 128):
        v = p.view(slot, 1000)
        assert v.size == 1000 and (v.ptr - base) % 512 == 0      # 256 elements apart: 16-byte packs stay possible
        assert base <= v.ptr and v.ptr + v.nbytes <= base + p.nbytes
    assert p.view(128, 1 << 12).ptr == base                      # wraps around past the capacity


def test_poisoned_context_stops_the_run_and_keeps_the_report(fake_gpu, tmp_path, capsys):
    fake_gpu.broken.add("ew_gelu_f32")
    rc = cli.main(["--quick", "--sizes", "10", "--suites", "copy,map", "--ops", "gelu", "--dtypes", "f32",
                   "--out", str(tmp_path), "--no-png", "--peers", "none"])
    assert rc == 0
    doc = json.loads((tmp_path / "bench.json").read_text())
    assert any("run stopped" in n and "cudaErrorIllegalAddress" in n for n in doc["notes"])
    assert [r["suite"] for r in doc["rows"]] == ["copy"]


def test_numpy_suite_skips_what_host_memory_cannot_hold(fake_gpu, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(numpy_suite, "host_available", lambda: 1 << 14)
    rc = cli.main(["--suites", "numpy", "--ops", "relu", "--dtypes", "f32", "--numpy-sizes", "8,12",
                   "--peers", "numpy", "--out", str(tmp_path), "--no-png"])
    assert rc == 0
    doc = json.loads((tmp_path / "bench.json").read_text())
    sizes = {r["n"] for r in doc["rows"] if r["suite"] == "numpy"}
    assert sizes == {1 << 8}
    assert any("2^12 float32 skipped" in n and "host memory" in n for n in doc["notes"])
    assert any("torch skipped" not in n for n in doc["notes"])


def _view_run(monkeypatch, tmp_path, fail_torch_at=None):
    """A simulated `--suites layouts` run in float32; returns (rows, notes, log of the view
    timings in order: 'pyew' or 'torch'). fail_torch_at: PyTorch's view timing that raises (1-based)."""
    import pyew
    log = []
    bias_timings = 2 * len(layout_suite.BIAS_OPS) * 2     # come first: row and channel, pyew and torch

    class Recording(FakeTimer):
        def measure(self, calls, reps, warmup=2, budget_ms=2000.0, check=None):
            pyews = {getattr(pyew, name) for name in (*layout_suite.BIAS_OPS, *layout_suite.VIEW_OPS)}
            log.append("pyew" if calls[0].func in pyews else "torch")
            views = log[bias_timings:]
            if views and views[-1] == "torch" and views.count("torch") == fail_torch_at:
                raise RuntimeError("simulated failure")
            return super().measure(calls, reps, warmup, budget_ms, check)

    monkeypatch.setattr(timing, "GpuTimer", Recording)
    rc = cli.main(["--quick", "--suites", "layouts", "--dtypes", "float32", "--out", str(tmp_path),
                   "--no-png", "--max-time", "120"])
    assert rc == 0
    doc = json.loads((tmp_path / "bench.json").read_text())
    assert log[:bias_timings] == ["pyew", "torch"] * (bias_timings // 2)
    return [r for r in doc["rows"] if r["suite"] == "layouts"], doc["notes"], log[bias_timings:]


def test_views_alternate_with_torch_over_rounds(fake_gpu, tmp_path, monkeypatch, capsys):
    rows, notes, log = _view_run(monkeypatch, tmp_path)
    n_views = len(layout_suite.VIEW_OPS) * (1 + len(layout_suite.OFFSETS))
    assert log == ["pyew", "torch"] * (layout_suite.VIEW_ROUNDS * n_views)
    views = [r for r in rows if " view +" in r["name"]]
    assert len(views) == 2 * n_views
    assert len({(r["name"], r["impl"]) for r in views}) == len(views)       # one row each, the median
    assert all(r["rounds"] == layout_suite.VIEW_ROUNDS and r["ms"] > 0 for r in views)
    assert "views offset 1..7 elements" in capsys.readouterr().out
    assert not any("failed" in n for n in notes)


def test_a_view_timing_that_fails_drops_only_its_row(fake_gpu, tmp_path, monkeypatch, capsys):
    rows, notes, log = _view_run(monkeypatch, tmp_path, fail_torch_at=2)   # the first view's second round
    first = [r for r in rows if r["name"] == "relu view +0"]
    assert [r["impl"] for r in first] == ["pyew"] and first[0]["rounds"] == layout_suite.VIEW_ROUNDS
    assert log[:5] == ["pyew", "torch", "pyew", "torch", "pyew"]          # torch out after its failure
    assert any("torch relu view +0 float32 failed" in n and "simulated failure" in n for n in notes)
    assert {r["impl"] for r in rows if r["name"] == "relu view +1"} == {"pyew", "torch"}
