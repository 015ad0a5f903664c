"""The runtime's parts reach CUDA only through their call objects, which the CPU stand-ins of
tests/fake_cuda.py replace one for one: so no CPU test reaches a CUDA call, however the runtime
grows."""
from __future__ import annotations

import ast
import inspect

import pytest

from pyew import cudart, devices, memory, pinned, streams
from pyew import runtime as rt

from .fake_cuda import FakeDevices, FakeHost, FakeMemory, FakeStreams, install
from .helpers import ROOT

PARTS = [(devices, devices.CudaDevices, FakeDevices), (streams, streams.CudaStreams, FakeStreams),
         (memory, memory.CudaMemory, FakeMemory), (pinned, pinned.CudaHost, FakeHost)]


@pytest.mark.parametrize("part,real,fake", PARTS, ids=[p[0].__name__ for p in PARTS])
def test_each_stand_in_answers_every_call_of_its_part(part, real, fake):
    assert isinstance(part.cuda, real)
    for name, fn in vars(real).items():
        if callable(fn) and not name.startswith("_"):
            assert callable(getattr(fake, name, None)), f"{fake.__name__} has no {name}()"
            assert inspect.signature(getattr(fake, name)).parameters.keys() == \
                inspect.signature(fn).parameters.keys(), f"{fake.__name__}.{name} takes other arguments"


def test_only_the_call_objects_use_the_bindings():
    """cuda-python's runtime and driver bindings are used in cudart.Calls subclasses alone (and
    imported in cudart), so a new runtime function can only reach CUDA through one."""
    found = []
    for path in sorted((ROOT / "pyew").rglob("*.py")):
        if path.name == "cudart.py":
            continue
        tree = ast.parse(path.read_text())
        inside = {id(n) for c in ast.walk(tree) if isinstance(c, ast.ClassDef)
                  and any(ast.unparse(b) in ("cudart.Calls", "Calls") for b in c.bases) for n in ast.walk(c)}
        for node in ast.walk(tree):
            binding = isinstance(node, ast.ImportFrom) and node.module == "cuda.bindings" and \
                {a.name for a in node.names} & {"runtime", "driver"}
            api = isinstance(node, ast.Attribute) and ast.unparse(node) in ("cudart.api", "self.rt")
            if (binding or api) and id(node) not in inside:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, f"CUDA reached outside a cudart.Calls subclass: {found}"


def test_a_cpu_test_cannot_reach_cuda(monkeypatch):
    install(monkeypatch)
    for part, _, fake in PARTS:
        assert isinstance(part.cuda, fake)
    with pytest.raises(AssertionError, match=r"a CPU test called CUDA \(cudaMallocAsync\)"):
        cudart.api.cudaMallocAsync(16, 0)


def test_the_facade_keeps_the_runtimes_names():
    for name in ("check", "DeviceProps", "Device", "device_count", "several", "only_one_gpu", "props", "device",
                 "current_ordinal", "on", "bind_thread", "pointer_device", "device_info", "synchronize",
                 "Stream", "RawStream", "ExternalStream", "DEFAULT_STREAM", "default_stream", "current_stream",
                 "resolve_stream", "foreign_stream", "Event", "use_blocking_waits", "wait_event", "stream_wait",
                 "new_stream", "stream_synchronize", "destroy_stream", "malloc", "free", "release_kept", "memset",
                 "copy_htod", "copy_dtoh", "copy_dtod", "copy_peer", "constant", "pool_usage", "reset_pool_peak",
                 "trim_pool", "host_alloc", "host_free", "host_pinned"):
        assert hasattr(rt, name), name


def test_a_stand_in_is_given_back_what_it_gave(monkeypatch):
    """Buffers kept for reuse, scalar slots, handshake events and device attributes learnt over the
    stand-in are forgotten with it, so the real calls never see its pointers or handles."""
    import numpy as np

    import pyew
    fake = install(monkeypatch)
    buf = pyew.array.Buffer(256, rt.DEFAULT_STREAM)
    del buf
    assert rt.DEFAULT_STREAM.reuse[256] and rt.props(0).name == "fake"
    assert memory.constant(np.float32(1).view(np.uint32).item(), 4, 0)
    rt.stream_wait(rt.DEFAULT_STREAM, rt.DEFAULT_STREAM)
    rt.forget()
    assert not any(rt.DEFAULT_STREAM.reuse.values()) and rt.DEFAULT_STREAM.held == 0
    assert devices.gpus.count is None and not devices.gpus.props and not memory._constants
    assert fake.device_bytes() > 0            # forgotten, not freed: the stand-in's memory is its own
