"""The CUDA runtime as the rest of pyew uses it: one namespace over devices, streams, memory and
pinned, each of which makes its CUDA calls through one object (its `cuda`) that the CPU tests
replace (tests/fake_cuda.py); cudart holds cuda-python's bindings, which only those objects call.
"""
from __future__ import annotations

# isort: off
from . import devices, memory, pinned, streams
from .cudart import check
from .devices import (Device, DeviceProps, bind_thread, check_ordinal, current_ordinal, device, device_count,
                      device_info, on, only_one_gpu, pointer_device, props, several, synchronize)
from .memory import (constant, copy_dtod, copy_dtoh, copy_htod, copy_peer, free, malloc, memset, pool_usage,
                     release_kept, reset_pool_peak, trim_pool)
from .pinned import host_alloc, host_free, host_pinned
from .streams import (DEFAULT_STREAM, Event, ExternalStream, RawStream, Stream, current_if_one_gpu, current_stream,
                      default_stream, destroy_stream, foreign_stream, new_stream, resolve_stream, stream_synchronize,
                      stream_wait, use_blocking_waits, wait_event)
# isort: on


def forget() -> None:
    """Forget, without freeing anything, what the parts learnt through their CUDA-call objects:
    for tests that swap those objects (tests/fake_cuda.py)."""
    for part in (memory, pinned, streams, devices):
        part.forget()
