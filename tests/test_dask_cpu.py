"""pyew.dask without a GPU: graphs, dtypes, chunks and metadata built without touching CUDA, and
whole computations over numpy chunks through the real call layer on the CPU stand-ins
(tests/fake_cuda.py, fake_kernels.py)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pyew

from .helpers import ROOT, manifest_ops

da = pytest.importorskip("dask.array")
pytestmark = pytest.mark.skipif(not manifest_ops(), reason="libew.so not built (make all)")


@pytest.fixture
def ed():
    import pyew.dask
    return pyew.dask


@pytest.fixture
def no_gpu(monkeypatch):
    """Any CUDA use fails the test: building a graph must not need a GPU."""
    def boom(*a, **k):
        raise AssertionError("CUDA touched while building a graph")
    for name in ("device", "props", "malloc", "copy_htod", "copy_dtoh", "current_ordinal"):
        monkeypatch.setattr(pyew.runtime, name, boom)


def test_graphs_need_no_gpu(ed, no_gpu):
    x = da.ones((100, 40), chunks=(30, 40), dtype=np.float16)
    w = np.ones(40, np.float32)
    y = ed.gelu(ed.add(ed.mul(x, w), 0.5))
    assert y.shape == (100, 40) and y.chunks == x.chunks and y.dtype == np.float32    # f16 * f32 -> f32
    assert type(y._meta) is np.ndarray and y._meta.dtype == np.float32
    assert ed.add(da.ones(5, chunks=2, dtype=np.int32), 2.5).dtype == np.float64        # like numpy 2
    assert ed.add(da.ones(5, chunks=2, dtype=np.int32), 7).dtype == np.int32            # a weak Python int
    assert ed.sigmoid(da.ones(5, chunks=2, dtype=np.int64)).dtype == np.float64        # as np.exp(int64)
    assert ed.map_blocks(lambda c: c, x, dtype="float32").dtype == np.float32
    assert pyew.dask is ed and ed.gelu.__name__ == "gelu" and "GELU" in ed.gelu.__doc__


def test_map_blocks_names_cover_what_shapes_the_result(ed, no_gpu):
    """Two map_blocks of one function differing only in dtype or in their axes are two graphs, as
    with dask.array.map_blocks: one name would let one stand in for the other."""
    x = da.ones((8, 4), chunks=(4, 4), dtype=np.float32)
    f = lambda c: c  # noqa: E731
    a, b = ed.map_blocks(f, x, dtype="float32"), ed.map_blocks(f, x, dtype="float64")
    c = ed.map_blocks(f, x, drop_axis=1, chunks=(4,))
    assert len({a.name, b.name, c.name}) == 3
    assert c.ndim == 1 and c._meta.ndim == 1
    assert ed.map_blocks(f, x, new_axis=2)._meta.ndim == 3
    assert ed.map_blocks(f, x, dtype="float32").name == a.name       # the same call, the same graph


def test_gpu_chunks_anywhere_set_the_meta(ed, no_gpu, monkeypatch):
    """With an input whose chunks live on the GPU (CuPy meta; stood in for here by marking one
    array's meta), the output's meta comes from that input, whichever operand it is."""
    x = da.ones((100, 40), chunks=(30, 40), dtype=np.float32)
    g = da.ones(40, chunks=40, dtype=np.float32)
    monkeypatch.setattr(ed, "_is_cupy", lambda meta: meta is g._meta)
    for args in ((x, g), (g, x), (x, 2.0, g)[::2]):
        y = ed.mul(*args)
        assert y.shape == (100, 40) and y.dtype == np.float32 and y._meta.ndim == 2


def test_numpy_chunks_compute_like_the_ops(ed, fakes, rng):
    a = rng.standard_normal((70, 33)).astype(np.float32)
    w = rng.standard_normal(33).astype(np.float32)
    x = da.from_array(a, chunks=(20, 15))                    # ragged chunks on both axes
    wd = da.from_array(w, chunks=11)                         # a dask operand with other chunks
    for y in (ed.gelu(ed.add(ed.mul(x, w), 0.25)), ed.gelu(ed.add(ed.mul(x, wd), 0.25))):
        got = y.compute(scheduler="sync")
        assert type(got) is np.ndarray and got.dtype == np.float32
        np.testing.assert_array_equal(got, pyew.gelu(pyew.add(pyew.mul(a, w), 0.25)))
    col = rng.standard_normal((70, 1)).astype(np.float32)    # a broadcast column
    np.testing.assert_array_equal(ed.add(x, col).compute(scheduler="threads"), a + col)


def test_map_takes_an_op_or_its_name_and_params(ed, fakes, rng):
    a = rng.standard_normal(50).astype(np.float32)
    x = da.from_array(a, chunks=16)
    np.testing.assert_array_equal(ed.map(pyew.relu, x).compute(scheduler="sync"), np.maximum(a, 0))
    np.testing.assert_array_equal(ed.map("elu", x, alpha=0.5).compute(scheduler="sync"), pyew.elu(a, alpha=0.5))


def test_map_blocks_runs_a_function_of_device_arrays(ed, fakes, rng):
    a = rng.standard_normal((40, 6)).astype(np.float32)
    x = da.from_array(a, chunks=(16, 6))
    seen = []

    def f(c, w):
        seen.append(type(c))
        return pyew.sigmoid(pyew.mul(c, w))

    y = ed.map_blocks(f, x, np.float32(2))
    got = y.compute(scheduler="sync")
    assert set(seen) == {pyew.DeviceArray} and type(got) is np.ndarray
    np.testing.assert_array_equal(got, pyew.sigmoid(a * np.float32(2)))
    # each chunk comes back in page-locked memory from pyew's pool
    import dask
    blocks = dask.compute(*y.to_delayed().ravel(), scheduler="sync")
    assert len(blocks) == 3 and all(pyew.pinned.is_pinned(b) for b in blocks)
    np.testing.assert_array_equal(np.concatenate(blocks), got)


@pytest.mark.parametrize("call,err,match", [
    (lambda ed, x: ed.map("relu_mask", x), TypeError, "'relu_mask' is not a map op"),
    (lambda ed, x: ed.map("nosuch", x), TypeError, "'nosuch' is not a map op"),
    (lambda ed, x: ed.map(len, x), TypeError, "builtin_function_or_method is not a map op"),
    (lambda ed, x: ed.map("elu", x, beta=1.0), TypeError, r"elu\(\) got unexpected keyword argument\(s\) beta; "
                                                          "its params: alpha"),
    (lambda ed, x: ed.scale(x), TypeError, r"scale\(\) missing required param 'alpha'"),
    (lambda ed, x: ed.scale(x, alpha="2"), TypeError, r"param 'alpha' must be a float, not str"),
    (lambda ed, x: ed.add(x), TypeError, r"add\(\) takes 2 input\(s\)"),
    (lambda ed, x: ed.gelu(1.0), TypeError, "give at least one array"),
    (lambda ed, x: ed.gelu(x.astype(np.complex64)), TypeError, "complex64 input, which pyew does not support"),
    (lambda ed, x: ed.nosuch, AttributeError, "'nosuch' .*not a map op"),
    (lambda ed, x: ed.map_blocks(pyew.relu, 3.0), TypeError, "give at least one dask array"),
])
def test_bad_calls_say_what_is_wrong(ed, no_gpu, call, err, match):
    with pytest.raises(err, match=match):
        call(ed, da.ones(8, chunks=4, dtype=np.float32))


def test_ops_of_loaded_spec_files_build_graphs(ed, no_gpu):
    """Ops pyew.load_spec loaded are pyew.dask functions too, by name or function, with their params
    and dtypes; numpy's names for library ops are not (pyew has no pyew.multiply either)."""
    pytest.importorskip("mako", reason="pyew.load_spec renders with mako")
    from pyew import jit
    if jit.unavailable():
        pytest.skip(jit.unavailable())
    ops = pyew.load_spec(ROOT / "examples" / "my_ops.toml")
    x = da.ones((40, 30), chunks=(16, 30), dtype=np.float16)
    b = da.ones(30, chunks=30, dtype=np.float32)
    y = ed.softplus(ed.bias_gelu(x, b), beta=2.0)
    assert y.dtype == np.float32 and y.chunks == x.chunks and ed.softplus.__name__ == "softplus"
    assert ed.map(ops.softplus, x).dtype == np.float16
    with pytest.raises(TypeError, match="softplus\\(\\) got unexpected keyword argument\\(s\\) alpha; its params"):
        ed.map("softplus", x, alpha=1.0)
    with pytest.raises(TypeError, match="not a map op of the loaded library or of a spec file"):
        ed.map(lambda v: v, x)
    with pytest.raises(AttributeError, match="'multiply'"):
        assert ed.multiply is None, "numpy names are not pyew.dask functions"


def test_map_blocks_checks_what_the_function_returns(ed, fakes):
    x = da.ones(8, chunks=4, dtype=np.float32)
    with pytest.raises(TypeError, match="returned a ndarray; it must return a pyew DeviceArray"):
        ed.map_blocks(lambda c: np.ones(4), x).compute(scheduler="sync")
    with pytest.raises(TypeError, match="returned float64, but the dask array was declared float32"):
        ed.map_blocks(lambda c: pyew.add(c, np.float64(1)), x).compute(scheduler="sync")


def test_without_dask_the_import_says_what_to_install():
    import subprocess
    import sys

    from .helpers import ROOT
    code = ("import sys; sys.modules['dask'] = None\n"
            "try:\n    import pyew.dask\nexcept ImportError as e:\n    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "pyew.dask needs dask" in r.stdout and "pip install 'pyew[dask]'" in r.stdout, r.stdout + r.stderr


def test_bench_dask_arguments(capsys):
    from pyew.bench import dask_scaling
    assert dask_scaling._count("2**26") == 1 << 26 and dask_scaling._count("4096") == 4096
    with pytest.raises(SystemExit):
        dask_scaling.main(["--elements", "lots"])
    assert "is not a count" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        dask_scaling.main(["--in-flight", "0"])
    assert "--in-flight, --repeats and --threads must be at least 1" in capsys.readouterr().err
    for argv, said in ((["--variants", "opz"], "--variants: opz given; choose from ops, map_blocks"),
                       (["--chunks", "gpu"], "--chunks: gpu given; choose from numpy, cupy")):
        with pytest.raises(SystemExit):
            dask_scaling.main(argv)
        assert said in capsys.readouterr().err
    try:
        import dask_cuda  # noqa: F401
    except ImportError:
        assert dask_scaling.main(["--gpus", "1"]) == 2
        assert "needs dask, distributed and dask-cuda" in capsys.readouterr().err


def test_chains_fuse_into_one_kernel_per_chunk(ed, fakes, rng, monkeypatch):
    from pyew import fused, library
    a = rng.standard_normal((60, 20)).astype(np.float32)
    x = da.from_array(a, chunks=(20, 20))
    y = ed.gelu(ed.add(ed.mul(x, 2.0), 0.25))
    formulas, ops = [], []
    real_formula, real_op = fused.Program.launch_ptrs, library.launch
    monkeypatch.setattr(fused.Program, "launch_ptrs", lambda *a: formulas.append(1) or real_formula(*a))
    monkeypatch.setattr(library, "launch", lambda *a: ops.append(1) or real_op(*a))
    got = y.compute(scheduler="sync")
    assert len(formulas) == 3 and not ops, "one fused kernel per chunk, no kernel per op"
    np.testing.assert_array_equal(got, pyew.gelu(pyew.add(pyew.mul(a, 2.0), 0.25)))


@pytest.mark.parametrize("device_bytes, whole", [(1 << 20, True), (64 << 10, False)])
@pytest.mark.parametrize("small_bytes", [0, 1 << 20])
def test_numpy_chunks_the_engine_would_stream_go_up_whole(ed, fakes, rng, monkeypatch, device_bytes, whole,
                                                          small_bytes):
    """A numpy chunk whose formula moves more than small_bytes and fits device_bytes goes up whole
    (asarray), the formula runs on the GPU and its result comes down into the chunk's result; a
    smaller one goes in one shot, a larger one streams, and one op alone goes through the transfer
    engine. Each chunk's result as the ops give it."""
    a = rng.standard_normal((128, 256)).astype(np.float32)
    w = rng.standard_normal(256).astype(np.float32)
    x = da.from_array(a, chunks=(32, 256))              # 32 KiB chunks: 64 KiB and more moved
    uploads = []
    real = ed.asarray
    monkeypatch.setattr(ed, "asarray", lambda v, *args, **kw: uploads.append(v.shape) or real(v, *args, **kw))
    old = pyew.set_transfer_limits(device_bytes=device_bytes, small_bytes=small_bytes)
    try:
        for y, want, formula in ((ed.gelu(ed.add(ed.mul(x, w), 0.25)), pyew.gelu(pyew.add(pyew.mul(a, w), 0.25)), True),
                                 (ed.add(x, w), a + w, False)):
            uploads.clear()
            got = y.compute(scheduler="sync")
            assert type(got) is np.ndarray and got.dtype == np.float32
            np.testing.assert_array_equal(got, want)
            expect = [(32, 256), (256,)] * 4 if formula and whole and not small_bytes else []
            assert uploads == expect
    finally:
        pyew.set_transfer_limits(**{k: v for k, v in old.items() if k != "pinned_pool_bytes"})


def test_numpy_chunks_the_engine_would_decline_go_up_whole(ed, fakes, rng, monkeypatch):
    """A chunk's formula within small_bytes whose staged operands pass the small buffer's cap (three
    inputs and a result too small for the pool: all staged) would stream, so it goes up whole, as
    one that moves more than small_bytes does; with a larger small_bytes it goes in one shot."""
    a, w, b = (rng.standard_normal((128, 256)).astype(np.float32) for _ in range(3))
    x, y, z = (da.from_array(v, chunks=(32, 256)) for v in (a, w, b))      # 32 KiB chunks: 128 KiB moved
    uploads = []
    real = ed.asarray
    monkeypatch.setattr(ed, "asarray", lambda v, *args, **kw: uploads.append(v.shape) or real(v, *args, **kw))
    for small_bytes, want in ((128 << 10, [(32, 256)] * 12), (1 << 20, [])):
        old = pyew.set_transfer_limits(device_bytes=1 << 20, small_bytes=small_bytes)
        try:
            uploads.clear()
            got = ed.add(ed.mul(x, y), z).compute(scheduler="sync")
            np.testing.assert_array_equal(got, pyew.add(pyew.mul(a, w), b))
            assert uploads == want
        finally:
            pyew.set_transfer_limits(**{k: v for k, v in old.items() if k != "pinned_pool_bytes"})


def test_dask_evaluate(ed, fakes, rng):
    a = rng.standard_normal((50, 8)).astype(np.float32)
    w = rng.standard_normal(8).astype(np.float32)
    x = da.from_array(a, chunks=(16, 8))
    y = ed.evaluate("sigmoid(x * w) + s", local_dict={"x": x, "w": w, "s": 0.5})
    assert y.dtype == np.float32 and y.chunks == x.chunks
    np.testing.assert_allclose(y.compute(scheduler="sync"), pyew.add(pyew.sigmoid(pyew.mul(a, w)), 0.5), rtol=1e-6)
    z = ed.evaluate("x + 1")                 # names from the caller's frame
    np.testing.assert_array_equal(z.compute(scheduler="sync"), a + 1)
    with pytest.raises(pyew.FormulaError, match="did you mean"):
        ed.evaluate("xx + 1", local_dict={"x": x})


def test_a_loaded_spec_op_alone_computes_and_its_file_travels_with_the_task(ed, fakes, rng, monkeypatch):
    """One op of a loaded spec file runs as its formula (the library has no kernel of it); the task
    names the file, so a worker process that has not loaded it loads it first."""
    pytest.importorskip("mako", reason="pyew.load_spec renders with mako")
    from pyew import jit, specs
    if jit.unavailable():
        pytest.skip(jit.unavailable())
    pyew.load_spec(ROOT / "examples" / "my_ops.toml")
    a = rng.standard_normal(40).astype(np.float32)
    y = ed.softplus(da.from_array(a, chunks=20), beta=2.0)
    np.testing.assert_allclose(y.compute(scheduler="sync"), np.log1p(np.exp(2 * a)) / 2, rtol=1e-6)
    task = dict(y.dask)[(y.name, 0)]
    fn = task[0] if isinstance(task, tuple) else task.func
    path = str((ROOT / "examples" / "my_ops.toml").resolve())
    ((shipped, pairs),) = fn.args[4]
    assert shipped == path and [n for n, _ in pairs] == ["softplus"]
    loads, fresh = [], {}
    monkeypatch.setattr(specs, "_ops", fresh)           # as in a fresh worker process
    monkeypatch.setattr(specs, "_earlier", {})
    monkeypatch.setattr(specs, "_load_file", lambda p, by_task: (loads.append(p),
                                                                 fresh.update({n: (None, d) for n, d in pairs})))
    ed._apply_formula(*fn.args, a[:20])
    assert loads == [path]
    ed._apply_formula(*fn.args, a[:20])                 # loaded now: not again
    assert loads == [path]
    fresh.clear()
    monkeypatch.setattr(specs, "_load_file", lambda p, by_task: loads.append(p))     # the file changed since
    with pytest.raises(pyew.SpecError, match="no longer define softplus as the process that built this dask graph"):
        ed._apply_formula(*fn.args, a[:20])


def test_a_changed_definition_is_another_graph_and_travels(ed, fakes, tmp_path):
    """After load_spec takes another definition, pyew.dask builds another graph (its key names the
    definition), takes the functions returned before, and ships the files in the order they were
    loaded, so a worker ends with the definitions the client has (an op calling one redefined by
    another file included)."""
    pytest.importorskip("mako", reason="pyew.load_spec renders with mako")
    from pyew import jit, specs
    if jit.unavailable():
        pytest.skip(jit.unavailable())
    inner, outer = f"inner_{id(tmp_path) % 99991}", f"outer_{id(tmp_path) % 99991}"
    first = tmp_path / "first.toml"
    first.write_text(f'[[op]]\nname = "{inner}"\ninputs = ["x"]\ndtypes = ["float32"]\nexpr = "x * C(2)"\n'
                     f'ref = "x * 2"\ndoc = "d."\n\n[[op]]\nname = "{outer}"\ninputs = ["x"]\n'
                     f'dtypes = ["float32"]\nexpr = "{inner}(x) + C(1)"\nref = "x * 2 + 1"\ndoc = "d."\n')
    old = getattr(pyew.load_spec(first), outer)
    x = da.from_array(np.arange(4, dtype=np.float32), chunks=2)
    before = ed.map(old, x)
    second = tmp_path / "second.toml"
    second.write_text(f'[[op]]\nname = "{inner}"\ninputs = ["x"]\ndtypes = ["float32"]\nexpr = "x * C(3)"\n'
                      f'ref = "x * 3"\ndoc = "d."\n')
    pyew.load_spec(second)
    after = ed.map(old, x)                  # the function returned before: it calls the current definition
    assert after.name != before.name
    task = dict(after.dask)[(after.name, 0)]
    fn = task[0] if isinstance(task, tuple) else task.func
    assert [(Path(p).name, [n for n, _ in pairs]) for p, pairs in fn.args[4]] == [
        ("first.toml", [outer]), ("second.toml", [inner])]
    with pytest.raises(pyew.SpecError, match=f"built with an earlier definition of {inner}, which pyew.load_spec has "
                                             "replaced since: build the graph again"):
        before.compute(scheduler="sync")
    assert ed.add(before, 1).name != ed.add(after, 1).name
    # a process that loaded nothing (a worker) ends with the definitions each task names, the graph's
    # before the redefinition included: what a task replaces there is no user's earlier definition
    old_task = dict(before.dask)[(before.name, 0)]
    old_defs = (old_task[0] if isinstance(old_task, tuple) else old_task.func).args[4]
    code = ("import ast, sys, pyew\nfrom pyew import specs\n"
            "for defs in ast.literal_eval(sys.argv[1]):\n"
            "    with specs.using(defs):\n"
            "        pairs = lambda ds: sorted(p for _, group in ds for p in group)\n"
            "        print(pairs(specs.definitions([sys.argv[2]])) == pairs(defs))")
    r = subprocess.run([sys.executable, "-c", code, repr([fn.args[4], old_defs, fn.args[4]]), outer], cwd=ROOT,
                       capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.stdout.split() == ["True"] * 3, r.stderr
    # a file moved and loaded from its new place: that place travels
    moved = tmp_path / "moved"
    moved.mkdir()
    (moved / "second.toml").write_text(second.read_text())
    pyew.load_spec(moved / "second.toml")
    assert [Path(p).parent.name for p, _ in specs.definitions([inner])] == ["moved"]
    with specs.using(specs.definitions([inner])):       # inside a task: a load would wait for the task itself
        with pytest.raises(pyew.SpecError, match="pyew.load_spec inside a pyew.dask task"):
            pyew.load_spec(second)


def test_fusing_stops_where_a_kernel_would_take_too_many_arrays(ed, fakes, rng):
    from pyew import jit
    parts = [rng.standard_normal(12).astype(np.float32) for _ in range(jit.MAX_ARRAYS + 2)]
    total = parts[0]
    for p in parts[1:]:
        total = ed.add(total, da.from_array(p, chunks=6)) if isinstance(total, da.Array) else \
            ed.add(da.from_array(total, chunks=6), da.from_array(p, chunks=6))
    np.testing.assert_allclose(total.compute(scheduler="sync"), np.sum(parts, axis=0, dtype=np.float32), rtol=1e-5)
    with pytest.raises(pyew.FormulaError, match="nests too deeply to compile.*split it"):
        ed.evaluate(" + ".join(["v"] * 600), local_dict={"v": da.from_array(parts[0], chunks=6)})
    with pytest.raises(TypeError, match="'u' is uint64, which pyew does not support"):
        ed.evaluate("u + 1", local_dict={"u": da.ones(4, chunks=2, dtype=np.uint64)})
    many = {f"v{i}": da.from_array(p, chunks=6) for i, p in enumerate(parts)}
    with pytest.raises(pyew.FormulaError, match="a fused kernel takes at most"):
        ed.evaluate(" + ".join(many), local_dict=many)


def test_a_chain_built_in_a_loop_fuses_in_pieces(ed, fakes):
    """500 steps build in a moment, without recursing 500 deep, and compute as the loop says."""
    from pyew import formula
    y = da.zeros(8, chunks=4, dtype=np.float32)
    for _ in range(500):
        y = ed.add(y, 1.0)
    assert len(formula.calls(ed.formula_of(y)[0])) <= ed.MAX_FUSED_CALLS
    np.testing.assert_array_equal(y.compute(scheduler="sync"), np.full(8, 500, np.float32))


def test_a_persisted_result_is_read_not_recomputed(ed, fakes, rng):
    from pyew import formula
    a = rng.standard_normal(8).astype(np.float32)
    y = ed.mul(ed.add(da.from_array(a, chunks=4), 1.0), 3.0).persist(scheduler="sync")
    z = ed.mul(y, 2.0)
    assert len(formula.calls(ed.formula_of(z)[0])) == 1        # y's chunks are its input
    np.testing.assert_allclose(z.compute(scheduler="sync"), (a + 1) * 3 * 2, rtol=1e-6)


def test_map_blocks_meta_follows_gpu_chunks_in_any_argument(ed, no_gpu, monkeypatch):
    x = da.ones(8, chunks=4, dtype=np.float32)
    g = da.ones(8, chunks=4, dtype=np.float32)
    monkeypatch.setattr(ed, "_is_cupy", lambda meta: meta is g._meta)
    used, real = [], ed.meta_from_array
    monkeypatch.setattr(ed, "meta_from_array", lambda m, ndim, dtype: used.append(m) or real(m, ndim=ndim, dtype=dtype))
    ed.map_blocks(lambda a, b: a, x, g)
    assert used == [g._meta]


def test_a_result_dropped_lets_its_inputs_go(ed, fakes):
    """What fusing needs is held by the result itself: dropping the result frees its inputs (a
    table of every result's formula had kept them, with their data, for thousands of graphs)."""
    import gc
    import weakref
    x = da.from_array(np.ones(8, np.float32), chunks=4)
    gone = weakref.ref(x)
    y = ed.mul(ed.add(x, 1.0), 2.0)
    assert ed.formula_of(y) is not None
    np.testing.assert_array_equal(y.compute(scheduler="sync"), np.full(8, 4, np.float32))
    del x, y
    gc.collect()
    assert gone() is None


def test_map_blocks_of_a_closure_over_gpu_arrays_copies_nothing_to_name_it(ed, fakes, monkeypatch):
    """Naming the graph of a lambda that captures a DeviceArray does not pickle it (which copies it
    to the host); masked chunks are refused, not computed as data."""
    import pyew
    w = pyew.asarray(np.full(8, 2, np.float32))
    copies = []
    real = pyew.DeviceArray.get
    monkeypatch.setattr(pyew.DeviceArray, "get", lambda self, *a, **k: copies.append(1) or real(self, *a, **k))
    x = da.ones(8, chunks=4, dtype=np.float32)
    f = lambda c: pyew.mul(c, w[:4])  # noqa: E731
    y = ed.map_blocks(f, x)
    assert copies == [] and ed.map_blocks(f, x).name == y.name
    assert ed.map_blocks(lambda c: pyew.mul(c, w[:4]), x).name != y.name
    np.testing.assert_array_equal(y.compute(scheduler="sync"), np.full(8, 2, np.float32))
    m = da.from_array(np.ma.masked_array(np.ones(8, np.float32), mask=[1, 0] * 4), chunks=4)
    with pytest.raises(TypeError, match="masked chunks"):
        ed.map_blocks(lambda c: c, m)
    with pytest.raises(TypeError, match="a masked array"):
        pyew.asarray(np.ma.masked_array(np.ones(3), mask=[1, 0, 0]))
