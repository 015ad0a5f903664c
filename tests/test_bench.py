"""The benchmark harness without a GPU: byte counts, option parsing, table/JSON/PNG writing, the
targets, peers that are missing, the naive entry points, and one whole run on a simulated GPU
(fake runtime, library and timer) so every suite's code path runs. No timing is asserted."""
from __future__ import annotations

import io
import itertools
import json
import subprocess
import sys
import types
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

pytest.importorskip("mako", reason="mako (the generator's template engine) is not installed")

from generator.render import generate, manifest as make_manifest
from generator.spec import load
from pyew import dtypes as dt
from pyew import library, opcall
from pyew import runtime as rt
from pyew.bench import api_suites, cli, peers, report, targets, timing, traffic
from pyew.bench.context import Progress, Run
from pyew.bench.data import Pool, random_host, stride
from pyew.bench.map_suites import map_cases
from pyew.bench.timing import Timing, rotation_slots

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "libew" / "ops.toml"


@pytest.fixture(scope="module")
def spec_manifest():
    return make_manifest(load([SPEC]))


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


def test_case_bytes_follow_the_manifest(spec_manifest):
    cases = {(c.op, c.dtype): c for c in map_cases(spec_manifest)}
    assert cases[("gelu", "bfloat16")].bytes(1000) == 4000
    assert cases[("add", "float32")].bytes(1000) == 12000
    assert cases[("to_float32", "float16")].bytes(1000) == 6000
    assert cases[("to_float16", "float32")].bytes(1000) == 6000
    assert cases[("elu", "float32")].params == {"alpha": 1.0}
    assert cases[("scale", "float32")].params == {"alpha": 1.5}     # required param: the bench's value


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


# ---- option parsing --------------------------------------------------------------------------------

def test_parse_sizes():
    assert cli.parse_sizes("16:28") == [1 << e for e in range(16, 29)]
    assert cli.parse_sizes("16:28:4") == [1 << 16, 1 << 20, 1 << 24, 1 << 28]
    assert cli.parse_sizes("20,2^24,16-17") == [1 << 16, 1 << 17, 1 << 20, 1 << 24]
    assert cli.parse_sizes("1000,20") == [1000, 1 << 20]                 # > 40: an element count
    for bad in ("abc", "28:16", "16:20:0", "", "2^40"):
        with pytest.raises(Exception):
            cli.parse_sizes(bad)


def test_parse_args_defaults_and_quick():
    a = cli.parse_args([])
    assert a.sizes == [1 << e for e in range(16, 29)] and a.repeat == cli.DEFAULT_REPEAT
    assert a.suites == list(cli.SUITES) and a.peers == ["torch", "cupy"] and a.out == Path("bench-out")
    q = cli.parse_args(["--quick", "--suites", "map,copy", "--dtypes", "half,f32", "--ops", "gelu,add",
                        "--peers", "none", "--out", "x"])
    assert q.sizes == [1 << 16, 1 << 20, 1 << 24, 1 << 28] and q.repeat == cli.QUICK_REPEAT
    assert q.suites == ["copy", "map"]                                   # always in run order
    assert q.dtypes == ["float16", "bfloat16", "float32"] and q.ops == ["gelu", "add"] and q.peers == []
    assert cli.parse_args(["--quick", "--repeat", "3", "--sizes", "10"]).repeat == 3


@pytest.mark.parametrize("argv", [["--suites", "nope"], ["--dtypes", "float8"], ["--repeat", "0"],
                                  ["--sizes", "x"]])
def test_parse_args_rejects(argv, capsys):
    with pytest.raises(SystemExit) as e:
        cli.parse_args(argv)
    assert e.value.code == 2


def test_unknown_op_is_refused(spec_manifest):
    args = cli.parse_args(["--ops", "gelu,nosuch"])
    msg = cli.check_ops(args, spec_manifest)
    assert "nosuch" in msg and "gelu" in msg.split("has:")[1]
    assert cli.check_ops(cli.parse_args(["--ops", "gelu"]), spec_manifest) is None


def test_cli_help_and_dispatch():
    r = subprocess.run([sys.executable, "-m", "pyew", "bench", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0 and "--sizes" in r.stdout and "relu_mask" in r.stdout
    r = subprocess.run([sys.executable, "-m", "pyew", "frobnicate"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2 and "unknown command" in r.stderr
    r = subprocess.run([sys.executable, "-m", "pyew"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2 and "bench" in r.stdout


# ---- peers ---------------------------------------------------------------------------------------------

def test_missing_peers_are_skipped_with_a_note(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)      # import torch -> ImportError
    monkeypatch.setitem(sys.modules, "cupy", None)
    notes = []
    got = peers.load(["torch", "cupy", "jax"], notes.append)
    assert got == {}
    assert any(n.startswith("torch skipped: ModuleNotFoundError") for n in notes), notes
    assert any(n.startswith("cupy skipped: ModuleNotFoundError") for n in notes), notes
    assert any("unknown peer 'jax'" in n for n in notes)


def test_peer_without_gpu_is_skipped(monkeypatch):
    fake = types.ModuleType("torch")
    fake.cuda = types.SimpleNamespace(is_available=lambda: False)
    monkeypatch.setitem(sys.modules, "torch", fake)
    notes = []
    assert peers.load(["torch"], notes.append) == {}
    assert "is_available() is False" in notes[0]


def test_every_default_map_op_has_peer_mappings(spec_manifest):
    names = {o["name"] for o in spec_manifest["ops"] if o["kind"] == "map"}
    assert names <= set(peers.TORCH_MAP), names - set(peers.TORCH_MAP)
    no_cupy = {n for n in names if not peers.mappable(n)["cupy"]}
    assert no_cupy <= {"to_bfloat16"}                          # CuPy has no bfloat16


def test_unmapped_op_gives_a_reason():
    tp = peers.TorchPeer("torch", mock.MagicMock())
    fn, why = tp.op("my_custom_op", "float32", {})
    assert fn is None and "no mapping" in why and "my_custom_op" in why
    cp = peers.CupyPeer("cupy", mock.MagicMock())
    assert cp.op("my_custom_op", "float32", {})[0] is None
    fn, why = cp.op("gelu", "bfloat16", {})
    assert fn is None and "bfloat16" in why


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


def test_torch_views_bfloat16_through_int16():
    t = mock.MagicMock()
    peer = peers.TorchPeer("torch", t)
    a = types.SimpleNamespace(shape=(4,), ptr=1 << 20, dtype=dt.BY_NAME["bfloat16"].np)
    peer.wrap(a)
    iface = t.as_tensor.call_args.args[0].__cuda_array_interface__
    assert iface["typestr"] == "<i2" and iface["data"] == (1 << 20, False)
    t.as_tensor.return_value.view.assert_called_with(t.bfloat16)


# ---- report: table, JSON, PNG, targets ----------------------------------------------------------------

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
    rows.append({"suite": "overhead", "name": "pyew.add(x, y)", "dtype": "float32", "n": 1, "impl": "pyew",
                 "us_per_call": 3.5, "min_us_per_call": 3.2})
    rows.append({"suite": "upsample", "name": "forward", "dtype": "float32", "n": 100, "shape": [1, 1, 10, 10],
                 "impl": "pyew", "ms": 0.4, "bytes": 2000, "gbps": 0.005})
    rows.append({"suite": "upsample", "name": "forward", "dtype": "float32", "n": 100, "shape": [1, 1, 10, 10],
                 "impl": "torch", "ms": 1.0, "bytes": 2000, "gbps": 0.002})
    for r in rows:
        if r.get("gbps") and r["suite"] != "copy":
            r["pct_copy"] = 100 * r["gbps"] / 3000.0
    return rows


META = {"date": "2026-01-01 00:00 UTC", "command": "python -m pyew bench", "seed": 1,
        "device": {"name": "Test GPU", "sms": 132, "l2_bytes": 50 << 20, "capability": [9, 0]},
        "map_order": [["gelu", "float16"], ["mul", "float16"], ["to_float32", "float16"]]}


def _md_tables_are_rectangular(text):
    for block in text.split("\n\n"):
        lines = [ln for ln in block.splitlines() if ln.startswith("|")]
        if lines:
            widths = {ln.count("|") for ln in lines}
            assert len(widths) == 1, block


def test_table_text():
    text = report.render(_rows(), 3000.0, META, ["torch skipped: test"])
    _md_tables_are_rectangular(text)
    assert "copy ceiling" in text and "**3000 GB/s**" in text
    head = text.split("## Map ops at 2^28 elements")[1]
    gelu = next(ln for ln in head.splitlines() if ln.startswith("| gelu | float16"))
    cells = [c.strip() for c in gelu.strip("|").split("|")]
    # tuning, pyew GB/s, % copy, naive, torch, torch %, CuPy, CuPy %, vs naive, vs torch, vs CuPy
    assert cells[2] == "compute"
    assert cells[3] == f"{(1 << 28) * 8 / 0.7e6:.0f}"
    assert cells[10:] == ["2.14x", "1.29x", "2.00x"]
    assert "mul float16 | 2^28" in text and "2.50x" in text         # seeds: template vs naive
    assert "float16 -> float32" in text and "0.50x" in text          # seeds: cast vs torch
    assert "`pyew.add(x, y)` | 3.50" in text
    assert "## pyew by size" in text and "| 2^26 | 2^28 |" in text
    assert "- torch skipped: test" in text


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
    now[0] = 11.0
    assert run.out_of_time() and run.out_of_time()
    assert len([n for n in run.notes if "--max-time" in n]) == 1


# ---- the naive entry points -------------------------------------------------------------------------

def test_naive_entry_in_manifest_and_source(tmp_path, spec_manifest):
    for op in spec_manifest["ops"]:
        if op["kind"] != "map":
            continue
        for k in op["kernels"]:
            roles = [e["role"] for e in k["entries"]]
            assert roles == ["forward", "naive"], (op["name"], roles)    # pyew binds entries[0]
            fwd, naive = k["entries"]
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


# ---- one whole run on a simulated GPU -----------------------------------------------------------------

class _FakeLib:
    def __init__(self, man):
        self.manifest, self.path, self.calls = man, Path("/fake/libew.so"), []
        self.symbols = {e["symbol"]: self._entry(e["symbol"], len(e["args"]))
                        for o in man["ops"] for k in o["kernels"] for e in k["entries"]}
        self.fill = lambda *a: 0

    def _entry(self, sym, nargs):
        def call(*args):
            assert len(args) == nargs, (sym, args)
            self.calls.append((sym, args))
            return 0
        return call

    def check(self, rc, where):
        assert rc == 0, where


class _FakeTimer:
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


@pytest.fixture
def fake_gpu(monkeypatch, spec_manifest):
    man = dict(spec_manifest, ops=[o for o in spec_manifest["ops"] if o["kind"] == "map"])
    lib = _FakeLib(man)
    ptrs = itertools.count(1 << 20, 1 << 16)
    dev = rt.Device(0, "Fake GPU", (9, 0), 132, 2048, 80 << 30, 1 << 20, None)
    info = {"ordinal": 0, "name": "Fake GPU", "capability": (9, 0), "sms": 132, "threads_per_sm": 2048,
            "l2_bytes": 1 << 20, "total_memory": 80 << 30, "free_memory": 70 << 30}
    ok = lambda *a: (0,)        # noqa: E731
    monkeypatch.setattr(library, "get", lambda: lib)
    monkeypatch.setattr(rt, "device", lambda: dev)
    monkeypatch.setattr(rt, "device_info", lambda: info)
    monkeypatch.setattr(rt, "malloc", lambda nbytes, s: next(ptrs) if nbytes else 0)
    for name in ("free", "copy_htod", "copy_dtoh", "copy_dtod", "stream_wait"):
        monkeypatch.setattr(rt, name, lambda *a: None)
    monkeypatch.setattr(rt, "synchronize", lambda: None)
    monkeypatch.setattr(rt, "_rt", types.SimpleNamespace(cudaMemsetAsync=ok, cudaMemPoolTrimTo=ok,
                                                          cudaStreamSynchronize=ok))
    monkeypatch.setattr(timing, "GpuTimer", _FakeTimer)
    monkeypatch.setattr(peers, "LOADERS", {
        "torch": lambda: peers.TorchPeer("torch", mock.MagicMock(__version__="fake")),
        "cupy": lambda: peers.CupyPeer("cupy", mock.MagicMock(__version__="fake"))})
    monkeypatch.setattr(api_suites, "ROUNDTRIP_N", 1 << 10)
    monkeypatch.setattr(api_suites, "OVERHEAD_QUICK", (20, 2))
    opcall.reset()
    yield lib
    opcall.reset()


def test_simulated_run(fake_gpu, tmp_path, capsys):
    rc = cli.main(["--quick", "--sizes", "10,12", "--ops", "gelu,add,mul,to_float32,to_float16",
                   "--out", str(tmp_path), "--no-png", "--max-time", "120"])
    assert rc == 0
    out, err = capsys.readouterr()
    doc = json.loads((tmp_path / "bench.json").read_text())
    rows = doc["rows"]
    keys = {(r["suite"], r["name"], r["dtype"], r["n"], r["impl"]) for r in rows}
    for impl in ("pyew", "naive", "torch", "cupy"):
        assert ("map", "gelu", "float16", 1 << 12, impl) in keys
        assert ("map", "add", "int64", 1 << 10, impl) in keys
    assert ("map", "gelu", "bfloat16", 1 << 12, "torch") in keys
    assert ("map", "gelu", "bfloat16", 1 << 12, "cupy") not in keys          # CuPy: no bfloat16
    assert len(keys) == len(rows)                                              # nothing measured twice
    assert doc["copy_gbps"] and all("pct_copy" in r for r in rows if r["suite"] == "map")
    # pyew and naive ran through their own entry points with n and the device's launch numbers
    syms = {s for s, _ in fake_gpu.calls}
    assert "ew_gelu_f16" in syms and "ew_naive_gelu_f16" in syms
    sym, args = next(c for c in fake_gpu.calls if c[0] == "ew_naive_mul_f32")
    assert args[3] in (1 << 10, 1 << 12) and args[-2:] == (132, 2048)
    # the suites whose pyew functions this library lacks are skipped with a note
    assert any("no pyew.dot" in n for n in doc["notes"])
    assert {r["suite"] for r in rows} >= {"copy", "map", "overhead", "roundtrip"}
    assert "## Map ops at 2^12 elements" in out and "## Targets (issue 4)" in out
    assert "== map" in err
    assert (tmp_path / "bench.md").read_text() == out


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
    from pyew.errors import CudaError

    def broken(*args):
        raise CudaError(700, "cudaErrorIllegalAddress", "ew_gelu_f32")
    fake_gpu.symbols["ew_gelu_f32"] = broken
    rc = cli.main(["--quick", "--sizes", "10", "--suites", "copy,map", "--ops", "gelu", "--dtypes", "f32",
                   "--out", str(tmp_path), "--no-png", "--peers", "none"])
    assert rc == 0
    doc = json.loads((tmp_path / "bench.json").read_text())
    assert any("run stopped" in n and "cudaErrorIllegalAddress" in n for n in doc["notes"])
    assert [r["suite"] for r in doc["rows"]] == ["copy"]


def test_gpu_timer_logic_with_simulated_events(monkeypatch):
    """The event bookkeeping of GpuTimer.measure on a fake clock: each call 'takes' 3 ms of GPU time,
    each prefill memset 0.1 ms; a slow call gets fewer reps within the budget."""
    clock = [0.0]

    class Ev:
        t = None

    def record(ev, stream):
        ev.t = clock[0]
        return (0,)

    def memset(*a):
        clock[0] += 0.1
        return (0,)
    fake = types.SimpleNamespace(
        cudaEventCreate=lambda: (0, Ev()), cudaEventRecord=record, cudaEventSynchronize=lambda ev: (0,),
        cudaEventElapsedTime=lambda a, b: (0, b.t - a.t), cudaMemsetAsync=memset, cudaEventDestroy=lambda ev: (0,))
    monkeypatch.setattr(rt, "_rt", fake)
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
