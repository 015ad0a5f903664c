"""pyew.dask on the GPU: numpy chunks through the transfer engine, CuPy chunks in place, the
distributed scheduler with worker processes, and dask-cuda's one worker per GPU."""
from __future__ import annotations

import os

import numpy as np
import pytest

import pyew

from .helpers import ROOT

pytestmark = pytest.mark.gpu
da = pytest.importorskip("dask.array")
ed = pytest.importorskip("pyew.dask")

SHAPE, CHUNKS = (1000, 257), (300, 100)        # ragged edge chunks


def gelu_ref(v):
    from math import erf
    v = np.asarray(v, np.float64)
    return 0.5 * v * (1 + np.vectorize(erf)(v / np.sqrt(2)))


def pipeline_ref(a, w, b):
    """x * w + b rounded to float32 at each step as the ops do, then gelu in float64."""
    return gelu_ref((a * w).astype(np.float32) + np.float32(b))


@pytest.fixture
def data(rng):
    a = rng.standard_normal(SHAPE).astype(np.float32)
    w = rng.standard_normal(SHAPE[1]).astype(np.float32)
    b = np.float32(0.25)
    return a, w, b


def check(y, ref):
    np.testing.assert_allclose(np.asarray(y, np.float64), ref, rtol=2e-5, atol=1e-6)


def test_numpy_chunks(data):
    a, w, b = data
    x = da.from_array(a, chunks=CHUNKS)
    y = ed.gelu(ed.add(ed.mul(x, w), b))
    assert y.dtype == np.float32 and y.chunks == x.chunks and type(y._meta) is np.ndarray
    r = y.compute(scheduler="threads")
    assert type(r) is np.ndarray
    check(r, pipeline_ref(a, w, b))
    rows = da.from_array(a, chunks=(300, SHAPE[1]))          # blocks of whole rows: w applies to each
    z = ed.map_blocks(lambda c: pyew.gelu(pyew.add(pyew.mul(c, w), b)), rows)
    check(z.compute(scheduler="threads"), pipeline_ref(a, w, b))
    import dask
    blocks = dask.compute(*z.to_delayed().ravel(), scheduler="threads")
    assert all(pyew.pinned.is_pinned(c) for c in blocks)           # came down into pinned memory
    check(np.concatenate(blocks), pipeline_ref(a, w, b))


def test_cupy_chunks(data, cupy):
    a, w, b = data
    x = da.from_array(a, chunks=CHUNKS).map_blocks(cupy.asarray)
    y = ed.gelu(ed.add(ed.mul(x, cupy.asarray(w)), b))
    assert type(y._meta) is cupy.ndarray and y.dtype == np.float32
    r = y.compute(scheduler="threads")
    assert type(r) is cupy.ndarray
    check(cupy.asnumpy(r), pipeline_ref(a, w, b))
    rows = da.from_array(a, chunks=(300, SHAPE[1])).map_blocks(cupy.asarray)
    z = ed.map_blocks(lambda c: pyew.gelu(pyew.add(pyew.mul(c, w), b)), rows)
    r2 = z.compute(scheduler="threads")
    assert type(r2) is cupy.ndarray
    check(cupy.asnumpy(r2), pipeline_ref(a, w, b))
    # CuPy code that follows on a non-default stream sees pyew's results
    with cupy.cuda.Stream(non_blocking=True):
        s = (ed.add(x, 1.0) * 2).sum().compute(scheduler="sync")
        assert abs(float(s) - float(((a.astype(np.float64) + 1) * 2).sum())) < 1e-3 * a.size


def test_params_and_promotion(rng):
    a = rng.integers(-50, 50, size=(40, 30)).astype(np.int32)
    x = da.from_array(a, chunks=(16, 16))
    y = ed.add(x, 2.5)                                      # int32 + Python float -> float64, like numpy
    assert y.dtype == np.float64
    np.testing.assert_array_equal(y.compute(scheduler="sync"), a + 2.5)
    f = rng.standard_normal((40, 30)).astype(np.float32)
    e = ed.map("elu", da.from_array(f, chunks=(16, 16)), alpha=0.5)
    np.testing.assert_allclose(e.compute(scheduler="sync"), np.where(f > 0, f, 0.5 * np.expm1(f.astype(np.float64))),
                               rtol=1e-6, atol=1e-7)


def test_ops_of_a_loaded_spec_file(rng):
    """A pyew.load_spec op in a chain of pyew.dask ops, run on the GPU chunk by chunk."""
    pytest.importorskip("mako", reason="pyew.load_spec renders with mako")
    pyew.load_spec(ROOT / "examples" / "my_ops.toml")
    f = rng.standard_normal((40, 30)).astype(np.float32)
    b = rng.standard_normal(30).astype(np.float32)
    y = ed.softplus(ed.mul(ed.bias_gelu(da.from_array(f, chunks=(16, 16)), b), 2.0), beta=0.5)
    g = gelu_ref(f + b)                                  # bias_gelu rounds x + b to float32 first
    z = 0.5 * (g.astype(np.float32) * 2).astype(np.float64)
    ref = np.where(z > 20, z / 0.5, np.log1p(np.exp(z)) / 0.5)
    np.testing.assert_allclose(y.compute(scheduler="sync"), ref, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_distributed_local_cluster_of_processes(data):
    distributed = pytest.importorskip("distributed")
    a, w, b = data
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    with cluster, distributed.Client(cluster) as client:
        x = da.from_array(a, chunks=CHUNKS)
        y = ed.gelu(ed.add(ed.mul(x, w), b))
        check(client.compute(y).result(), pipeline_ref(a, w, b))
        pids = set(client.run(os.getpid).values())
        assert len(pids) == 2


@pytest.mark.slow
def test_formulas_of_cupy_chunks_on_two_gpus(data, cupy):
    """Chunks of one formula on two GPUs: those on another GPU than the first chunk's are copied
    there, for one op and for a fused formula, as map_blocks does."""
    if pyew.device_count() < 2:
        pytest.skip("needs two GPUs")
    a, w, b = data

    def on(i):
        def put(c):
            with cupy.cuda.Device(i):
                return cupy.asarray(c)
        return put
    x0 = da.from_array(a, chunks=CHUNKS).map_blocks(on(0))
    x1 = da.from_array(a, chunks=CHUNKS).map_blocks(on(1))
    r = ed.add(x0, x1).compute(scheduler="sync")
    check(cupy.asnumpy(r), 2.0 * a.astype(np.float64))
    r = ed.gelu(ed.add(ed.mul(x1, x0), b)).compute(scheduler="sync")
    check(cupy.asnumpy(r), gelu_ref(a.astype(np.float64) * a + b))


def test_local_cuda_cluster_one_gpu_per_worker(data, cupy):
    pytest.importorskip("distributed")
    dask_cuda = pytest.importorskip("dask_cuda")
    import distributed
    n = pyew.device_count()
    if n < 2:
        pytest.skip("needs two GPUs")
    a, w, b = data
    with dask_cuda.LocalCUDACluster(CUDA_VISIBLE_DEVICES=[0, 1], dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        seen = client.run(lambda: (pyew.Device().id, pyew.device_info()["pci_bus_id"]))
        assert {d for d, _ in seen.values()} == {0}                 # each worker's own GPU is its device 0
        assert len({bus for _, bus in seen.values()}) == 2           # ... and they are two GPUs
        x = da.from_array(a, chunks=CHUNKS)
        check(client.compute(ed.gelu(ed.add(ed.mul(x, w), b))).result(), pipeline_ref(a, w, b))
        xc = x.map_blocks(cupy.asarray)
        r = client.compute(ed.gelu(ed.add(ed.mul(xc, w), b))).result()
        check(cupy.asnumpy(r), pipeline_ref(a, w, b))
