"""Fixtures and markers of the suite.

Tests marked `gpu` run only where libew.so loads and a CUDA GPU answers; elsewhere they skip with
the reason. The GPU is probed lazily, by the first gpu test that runs, so a CPU-only run never
touches the driver. `slow` marks long tests (deselect with -m "not slow").
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

_gpu_reason: list = []


def gpu_skip_reason() -> str | None:
    """Why GPU tests cannot run here (None if they can); probed once."""
    if not _gpu_reason:
        import pyew
        from pyew.errors import LibraryError, NoDeviceError
        reason = None
        try:
            pyew.ops()
            pyew.device_info()
        except LibraryError as e:
            reason = f"libew.so not usable: {e}"
        except NoDeviceError as e:
            reason = f"no GPU: {e}"
        _gpu_reason.append(reason)
    return _gpu_reason[0]


def pytest_runtest_setup(item):
    if item.get_closest_marker("gpu") is not None:
        reason = gpu_skip_reason()
        if reason is not None:
            pytest.skip(reason)


@pytest.fixture(autouse=True)
def _stand_in_memory_stays_in_its_test(monkeypatch):
    # with monkeypatch, so that this runs before a stand-in installed with it is taken out
    yield
    from . import fake_cuda
    fake_cuda.disarm()


@pytest.fixture
def rng(request):
    # fresh data every run, but reproducible from the printed seed when a test fails
    seed = np.random.SeedSequence().entropy % (2**32)
    request.node.user_properties.append(("seed", seed))
    return np.random.default_rng(seed)


@pytest.fixture
def small_grid(monkeypatch):
    """Pretend the device has 1 SM of 256 threads: grids shrink to a few blocks, so every
    grid-stride loop runs many trips on test-sized inputs."""
    import pyew
    rt = pyew.runtime
    tiny = dataclasses.replace(rt.device(), sms=1, threads_per_sm=256, launch_threads_per_sm=256)
    pyew.transfer.release()             # lanes made before keep the real dims
    monkeypatch.setitem(pyew.devices.gpus.props, tiny.ordinal, tiny)
    monkeypatch.delattr(rt.default_stream(tiny.ordinal), "dims", raising=False)   # read again from _props
    yield tiny
    pyew.transfer.release()


@pytest.fixture
def resident_threads(monkeypatch):
    """A setter for the resident threads per SM the device's launches use (below the hardware's
    maximum, the map kernels reserve unused shared memory so that fewer blocks fit on an SM)."""
    import pyew
    rt = pyew.runtime

    def use(threads: int):
        pyew.transfer.release()
        capped = dataclasses.replace(rt.device(), launch_threads_per_sm=threads)
        monkeypatch.setitem(pyew.devices.gpus.props, capped.ordinal, capped)
        monkeypatch.delattr(rt.default_stream(capped.ordinal), "dims", raising=False)
        return capped

    yield use
    pyew.transfer.release()


@pytest.fixture
def torch_cuda():
    """PyTorch with CUDA, or skip."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    return torch


@pytest.fixture
def cupy():
    cp = pytest.importorskip("cupy")
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("CuPy sees no GPU")
    except Exception as e:
        pytest.skip(f"CuPy cannot use the GPU: {e}")
    return cp


@pytest.fixture
def jax_gpu():
    jax = pytest.importorskip("jax")
    try:
        if not jax.devices("gpu"):
            pytest.skip("JAX sees no GPU")
    except Exception as e:
        pytest.skip(f"JAX has no GPU backend: {e}")
    return jax


@pytest.fixture
def fake_runtime(monkeypatch, transfer_limits):
    """The CPU stand-in for the CUDA runtime (tests/fake_cuda.py), with a transfer engine small
    enough that test-sized arrays stream in many blocks. The engine's pinned slots are the
    stand-in's memory, so they are released with it."""
    import pyew

    from . import fake_cuda
    transfer_limits(pinned_bytes=2 << 20, device_bytes=256 * 1024, threads=3, small_bytes=4096)
    yield fake_cuda.install(monkeypatch)
    pyew.transfer.release()


@pytest.fixture
def fakes(fake_runtime, monkeypatch):
    """fake_runtime and the stand-ins for the kernels (tests/fake_kernels.py), which follow the
    built library's manifest: skipped with the reason where no library loads."""
    import pyew

    from . import fake_kernels
    try:
        pyew.library.get()
    except pyew.LibraryError as e:
        pytest.skip(f"libew.so not usable: {e}")
    yield fake_kernels.install_all(monkeypatch)


@pytest.fixture
def transfer_limits():
    """Restore the transfer engine's limits after a test that changes them."""
    import pyew
    old = pyew.transfer_limits()
    yield pyew.set_transfer_limits
    pyew.set_transfer_limits(**old)
