"""Whole benchmark runs on a simulated GPU: the runtime's CUDA calls faked (tests/fake_cuda.py:
"device" memory is host memory), a library whose map entry points and the benchmark library's
naive ones compute the op's reference in numpy on that memory, peers as mocks (their foreign GPU
arrays CUDA Array Interface objects over fake device memory), GPU timing replaced. Every suite's
code path runs end to end; no timing is asserted."""
from __future__ import annotations

import io
import json
import sys
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
from pyew.bench import benchlib, cli, harness, peers, suite_api, suite_fusion, suite_layouts, suite_map, suite_numpy
from pyew.errors import CudaError

from . import reference
from .fake_cuda import device_view, install
from .test_bench import fake_manifest

SPEC = Path(__file__).resolve().parent.parent / "libew" / "ops.toml"
SMS, TPSM = 132, 2048
OPS = "gelu,add,mul,sigmoid,relu,to_float32,to_float16"


def compute(o, k, args):
    """A map entry's work on fake device memory: the op's reference, rounded to the output dtype."""
    arity = len(o["inputs"])
    out, ins, n = args[0], args[1:1 + arity], args[1 + arity]
    params = dict(zip([p["name"] for p in o["params"]], args[2 + arity:2 + arity + len(o["params"])]))
    ind = [dt.BY_NAME[d] for d in k.get("in_dtypes") or [k["dtype"]] * arity]
    xs = [device_view(p, d.np, (n,)) for p, d in zip(ins, ind)]
    with np.errstate(all="ignore"):
        want = reference.evaluate(o["ref"], o["inputs"], xs, params, dt.BY_NAME[k["dtype"]])
        device_view(out, dt.BY_NAME[k["out_dtype"]].np, (n,))[...] = want.astype(dt.BY_NAME[k["out_dtype"]].np)


class FakeLib:
    """The loaded library: map entries compute; other kinds' entries record their calls."""

    def __init__(self, raw):
        self.path, self.ext, self.build_command = Path("/fake/libew.so"), None, "make all"
        self.calls, self.broken, self.fill = [], set(), lambda *a: 0
        self.manifest = fake_manifest(raw, self.entry)

    def entry(self, o, k, e):
        def call(*args):
            assert len(args) == len(e["args"]), (e["symbol"], len(args))
            if e["symbol"] in self.broken:
                raise CudaError(700, "cudaErrorIllegalAddress", e["symbol"])
            self.calls.append((e["symbol"], args))
            if o["kind"] == "map" and e["role"] in ("forward", "naive"):
                compute(o, k, args)
            return 0
        return call

    def check(self, rc, where):
        assert rc == 0, where


def fake_bench_lib(lib, raw) -> dict:
    """The benchmark library's entries: naive twins of mul that compute, dot's atomics that record."""
    entries = {}
    for o in (o for o in raw["ops"] if o["name"] in ("mul", "dot")):
        for k in o["kernels"]:
            e = k["entries"][0]
            for role in (("naive",) if o["name"] == "mul" else ("half_atomic", "half2_pack")
                         if k["dtype"] in ("float16", "bfloat16") else ()):
                sym = e["symbol"].replace("ew_", "ew_naive_") if role == "naive" else f"ew_dot_{role}"
                entries[(o["name"], k["dtype"], role)] = (sym, lib.entry(o, k, e | {"symbol": sym, "role": role}))
    return entries


class Timer:
    def __init__(self, max_reps=256):
        self.count = 0

    def measure(self, calls, reps, warmup=2, budget_ms=2000.0, check=None):
        for c in calls:                     # every prepared call runs once: their arguments are valid
            r = c()
            if check is not None:
                check(r)
        self.count += 1
        return {"ms": 0.5 + self.count % 5 / 10, "min_ms": 0.5, "reps": reps}

    def close(self):
        pass


class Foreign:
    """Another library's GPU array: CUDA Array Interface v3 over fake device memory."""

    def __init__(self, fake, value):
        self.ptr = fake.malloc(4)
        device_view(self.ptr, np.float32, (1,))[...] = value

    @property
    def __cuda_array_interface__(self):
        return {"shape": (1,), "typestr": "<f4", "data": (self.ptr, False), "version": 3, "strides": None,
                "stream": 1}


@pytest.fixture
def gpu(monkeypatch):
    raw = make_manifest(load([SPEC]))
    lib = FakeLib(raw)
    fake = install(monkeypatch, [rt.DeviceProps(0, "Fake GPU", (9, 0), SMS, TPSM, 80 << 30, 1 << 20, None)])
    info = {"name": "Fake GPU", "capability": (9, 0), "sms": SMS, "threads_per_sm": TPSM, "l2_bytes": 1 << 20,
            "total_memory": 80 << 30, "free_memory": 70 << 30}
    monkeypatch.setattr(rt, "device_info", lambda *a: info)
    monkeypatch.setattr(fake.streams, "elapsed_ms", lambda start, end: 0.25)     # sustained runs take GPU time
    monkeypatch.setattr(library, "get", lambda: lib)
    monkeypatch.setattr(harness, "GpuTimer", Timer)
    monkeypatch.setattr(cli, "GpuTimer", Timer)
    bench = fake_bench_lib(lib, raw)
    monkeypatch.setattr(benchlib, "get", lambda run: bench)
    torch, cupy = mock.MagicMock(__version__="fake"), mock.MagicMock(__version__="fake")
    torch.full.side_effect = lambda shape, v, **kw: Foreign(fake, v)
    cupy.asarray.side_effect = lambda a: Foreign(fake, a[0]) if getattr(a, "size", 0) == 1 else mock.MagicMock()
    for name in ("cupyx", "cupyx.scipy", "cupyx.scipy.special"):
        monkeypatch.setitem(sys.modules, name, mock.MagicMock())
    monkeypatch.setattr(peers, "LOADERS", peers.LOADERS | {"torch": lambda: peers.TorchPeer("torch", torch),
                                                           "cupy": lambda: peers.CupyPeer("cupy", cupy)})
    monkeypatch.setattr(suite_api, "spawn", lambda payload, env: {
        "first_us": 2500.0, "second_us": 40.0, "third_us": 35.0, "import_ms": 300.0, "setup_ms": 500.0,
        "primer_first_us": 9000.0, "module_loading": None})
    for mod, name, value in ((suite_map, "COPY_BYTES", 1 << 20), (suite_api, "UPSAMPLE_SHAPE", (1, 2, 8, 8)),
                             (suite_api, "RELU_MASK_SHAPE", (1, 2, 8, 8)), (suite_numpy, "BW_BYTES", 1 << 20),
                             (suite_numpy, "CROSSOVER_SIZES", (1 << 8, 1 << 10)),
                             (suite_numpy, "CALL_BUDGET_S", 0.002), (suite_numpy, "POINT_BUDGET_S", 0.002),
                             (suite_layouts, "ROW_BIAS", ((16, 64), (64,))),
                             (suite_layouts, "CHANNEL_BIAS", ((2, 4, 8, 8), (4, 1, 1))),
                             (suite_layouts, "VIEW_N", 1 << 10)):
        monkeypatch.setattr(mod, name, value)
    from pyew import fused

    from . import fake_kernels
    monkeypatch.setattr(fused.Program, "launch_ptrs", fake_kernels._fake_formula)       # formulas on the CPU
    monkeypatch.setattr(suite_fusion, "_compile_times", lambda run, table: None)        # real NVRTC and a GPU
    for mod in (suite_numpy, suite_fusion):         # host clocks of a few calls
        monkeypatch.setattr(mod, "host", lambda fn, sync=None, *a, **kw: harness.host(fn, sync, 0.002, 2))
    monkeypatch.setattr(suite_api, "host_rounds", lambda run, what, sides, sync=None, **kw:
                        harness.host_rounds(run, what, sides, sync, rounds=2, budget_s=0.004))
    old = transfer.set_transfer_limits(pinned_bytes=4 << 20, device_bytes=1 << 20, threads=2, small_bytes=16 << 10)
    kinds.reset()
    yield lib
    kinds.reset()
    transfer.set_transfer_limits(**old)


def keys(doc):
    return {(r["suite"], r["name"], r["dtype"], r["n"], r["impl"]) for r in doc["rows"]}


def test_simulated_run(gpu, tmp_path, capsys):
    assert cli.main(["--quick", "--sizes", "10,12", "--ops", OPS, "--numpy-sizes", "10,12", "--cpu-peers-max", "12",
                     "--sustained", "--sustained-seconds", "0.002", "--out", str(tmp_path), "--no-png"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads((tmp_path / "bench.json").read_text())
    got = keys(doc)
    assert not [n for n in doc["notes"] if "failed" in n or "stopped" in n], doc["notes"]
    assert len(got) == len(doc["rows"])                                        # nothing measured twice
    assert {r["suite"] for r in doc["rows"]} >= {"copy", "map", "sustained", "dot", "upsample", "relu_mask",
                                                 "overhead", "interop", "firstcall", "pcie", "small", "crossover",
                                                 "numpy", "layouts", "fusion", "fusion numpy"}
    for impl in ("pyew", "torch", "cupy"):
        assert ("map", "gelu", "float16", 1 << 12, impl) in got and ("map", "add", "int64", 1 << 10, impl) in got
    assert ("map", "gelu", "bfloat16", 1 << 12, "cupy") not in got            # CuPy: no bfloat16
    assert ("map", "mul", "float16", 1 << 12, "naive") in got                 # the template suite, through libew_bench
    assert not any(k[4] == "naive" and k[1] != "mul" for k in got)
    sym, args = next(c for c in gpu.calls if c[0] == "ew_naive_mul_f32")
    assert args[3] == 1 << 12 and args[-2:] == (SMS, TPSM)
    assert {k[4] for k in got if k[0] == "dot"} == {"fast", "half_atomic", "half2_pack", "torch"}
    assert {r["impl"] for r in doc["rows"] if r["suite"] == "sustained"} == {"pyew", "torch"}
    assert all(r["pct_copy"] for r in doc["rows"] if r["suite"] == "map")
    p = next(r for r in doc["rows"] if r["suite"] == "numpy" and r["name"] == "add" and r["impl"] == "pyew"
             and r["dtype"] == "float32" and r["n"] == 1 << 10)
    assert p["floor_ratio"] > 0 and p["bytes"] == 12 << 10
    stage = next(r for r in doc["rows"] if r["suite"] == "pcie" and r["name"] == "host copy into pinned")
    pcie = next(r for r in doc["rows"] if r["suite"] == "pcie" and r["name"] == "pinned both ways")
    # the floor: all bytes over PCIe both ways, the staged ones over the host copy (a result this
    # small, 4 KiB, is staged too; one of 128 KiB or more comes down into a pooled block)
    assert stage["gbps"] > 0 and p["floor_ms"] == pytest.approx(max(p["bytes"] / (pcie["gbps"] * 1e6),
                                                                     p["bytes"] / (stage["gbps"] * 1e6)))
    fn = next(r for r in doc["rows"] if r["suite"] == "fusion numpy" and r["impl"] == "pyew")
    assert fn["floor_ratio"] == pytest.approx(fn["ms"] / fn["floor_ms"]) and fn["floor_ms"] > 0
    n = fn["n"]
    staged = 12 * n + (4 * n if 4 * n < (128 << 10) else 0)
    assert fn["floor_ms"] == pytest.approx(max(16 * n / (pcie["gbps"] * 1e6), staged / (stage["gbps"] * 1e6)))
    assert ("numpy", "add", "float16", 1 << 12, "numpy") in got
    assert ("numpy", "gelu", "float16", 1 << 12, "torch") in got
    assert not any(k[0] == "numpy" and k[2] not in ("float32", "float16") for k in got)
    assert {r["name"] for r in doc["rows"] if r["suite"] == "overhead" and r["impl"] == "pyew, Python replay"} == {
        "add", "mul by 0.5", "add (1,1)+(1,)", "add, torch operands", "add, cupy operands"}
    assert {r["impl"] for r in doc["rows"] if r["suite"] == "interop"} == {
        "DeviceArray", "torch", "torch + DeviceArray", "cupy", "cupy + DeviceArray"}
    assert {r["name"] for r in doc["rows"] if r["suite"] == "firstcall"} == {"relu", "sigmoid", "gelu", "add", "mul"}
    assert {r["rounds"] for r in doc["rows"] if r["suite"] == "layouts" and "offset" in r} == {3}
    assert "## pyew's performance targets" in out and "## Map ops at the largest size" in out and "== numpy" in err
    assert (tmp_path / "bench.md").read_text() == out and "wrote" in err


def test_torch_runs_on_pyews_buffers(gpu, tmp_path, capsys):
    cli.main(["--quick", "--sizes", "10", "--suites", "map", "--ops", "sigmoid,relu", "--dtypes", "f32",
              "--peers", "torch", "--out", str(tmp_path)])
    doc = json.loads((tmp_path / "bench.json").read_text())
    assert not [n for n in doc["notes"] if "stopped" in n], doc["notes"]        # one size: the headline only
    torch = cli.peers_mod.LOADERS["torch"]().mod
    pyew_outs = {args[0] for sym, args in gpu.calls if sym == "ew_sigmoid_f32"}
    wrapped = [c.args[0].__cuda_array_interface__["data"][0] for c in torch.as_tensor.call_args_list]
    assert pyew_outs and pyew_outs <= set(wrapped)        # each output buffer is also PyTorch's


def test_poisoned_context_stops_the_run_and_keeps_the_report(gpu, tmp_path, capsys):
    gpu.broken.add("ew_gelu_f32")
    assert cli.main(["--quick", "--sizes", "10", "--suites", "copy,map", "--ops", "gelu", "--dtypes", "f32",
                     "--out", str(tmp_path), "--peers", "none"]) == 0
    doc = json.loads((tmp_path / "bench.json").read_text())
    assert any("run stopped" in n and "cudaErrorIllegalAddress" in n for n in doc["notes"])
    assert [r["suite"] for r in doc["rows"]] == ["copy"]


def test_numpy_suite_skips_what_host_memory_cannot_hold(gpu, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(suite_numpy, "host_available", lambda: 1 << 14)
    cli.main(["--suites", "numpy", "--ops", "relu", "--dtypes", "f32", "--numpy-sizes", "8,12", "--peers", "numpy",
              "--out", str(tmp_path)])
    doc = json.loads((tmp_path / "bench.json").read_text())
    assert {r["n"] for r in doc["rows"] if r["suite"] == "numpy"} == {1 << 8}
    assert any("2^12 float32 skipped" in n and "host memory" in n for n in doc["notes"])


def test_numpy_suite_runs_only_float32_and_float16(gpu, tmp_path, capsys):
    cli.main(["--suites", "numpy", "--ops", "relu,add", "--dtypes", "bf16,f64", "--numpy-sizes", "8",
              "--peers", "numpy", "--out", str(tmp_path)])
    doc = json.loads((tmp_path / "bench.json").read_text())
    assert not [r for r in doc["rows"] if r["suite"] == "numpy"]
    assert any(n.startswith("numpy: no default map op with float32/float16 kernels") for n in doc["notes"])


def test_without_the_benchmark_library(gpu, tmp_path, monkeypatch, capsys):
    monkeypatch.undo()                      # the real loader, beside a library that has no neighbour
    run = harness.Run(cli.parse_args([]), io.StringIO())
    run.lib = mock.MagicMock(path=tmp_path / "libew.so")
    assert benchlib.get(run) == {} and benchlib.get(run) == {}
    assert len(run.notes) == 1 and "make bench" in run.notes[0]
    (tmp_path / "libew_bench.so").write_text("not a library")
    run = harness.Run(cli.parse_args([]), io.StringIO())
    run.lib = mock.MagicMock(path=tmp_path / "libew.so")
    assert benchlib.get(run) == {} and "not used" in run.notes[0]


def test_a_cached_formulas_host_time_is_timed_in_turns(fakes, tmp_path, monkeypatch):
    """The fusion suite's host rows: evaluate, fuse and add, each side timed in turns with the others."""
    from pyew import asarray, jit
    if jit.unavailable():
        pytest.skip(jit.unavailable())
    args = cli.parse_args(["--quick", "--out", str(tmp_path), "--peers", "none"])
    run = harness.Run(args, stream=io.StringIO())
    turns = []
    real = harness.alternate

    def spy(run_, what, sides, rounds, clock):
        turns.append((what, sorted(sides), rounds))
        return real(run_, what, sides, rounds, clock)
    monkeypatch.setattr(harness, "alternate", spy)
    suite_fusion._host_times(run, kinds.table(), asarray(np.ones(1, np.float32)))
    assert turns == [("fusion host", ["pyew.add", "pyew.evaluate", "pyew.fuse"], harness.HOST_ROUNDS)]
    rows = {r["impl"]: r for r in run.rows if r["suite"] == "fusion host"}
    assert set(rows) == {"pyew.add", "pyew.evaluate", "pyew.fuse"} and all(r["us_per_call"] > 0 for r in rows.values())


def test_torch_compile_first_call_is_timed_once_per_formula(gpu, tmp_path, capsys, monkeypatch):
    """A formula measured at two sizes: torch.compile's second size recompiles for the new shape,
    which is not a first call; one first-call row per formula."""
    for case in suite_fusion.CASES.values():
        monkeypatch.setitem(case, "sizes", (1 << 10, 1 << 12))
    assert cli.main(["--quick", "--suites", "copy,fusion", "--sizes", "10,12", "--out", str(tmp_path), "--no-png",
                     "--peers", "torch"]) == 0
    doc = json.loads((tmp_path / "bench.json").read_text())
    sizes = {r["n"] for r in doc["rows"] if r["suite"] == "fusion" and r["impl"] == "pyew" and r["n"]}
    firsts = [r for r in doc["rows"] if r["suite"] == "fusion" and r["name"] == "first call"
              and r["impl"] == "torch.compile"]
    assert sizes == {1 << 10, 1 << 12} and sorted(r["formula"] for r in firsts) == sorted(suite_fusion.CASES)
