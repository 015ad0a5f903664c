"""cuda-python's runtime bindings: pyew's one import of them, and check(). Only the Calls objects
of the runtime's parts use them (devices.cuda, streams.cuda, memory.cuda, pinned.cuda); the CPU
tests swap each of those for a stand-in, and `api` for an object that fails on use."""
from __future__ import annotations

from .errors import CudaError

try:
    from cuda.bindings import runtime as api
except ImportError:          # cuda-python missing: ops() still works, GPU use explains
    api = None

NO_CUDA_PYTHON = ("pyew needs cuda-python for GPU work, and it is not installed: "
                  "pip install cuda-python (import pyew and pyew.ops() work without it)")


class Calls:
    """One part's CUDA calls, made through the bindings it was made with: objects it made (an
    event, a stream) are destroyed through them too, whatever a test has swapped since."""

    def __init__(self):
        self.rt = api


def error_name(err) -> str:
    return getattr(err, "name", str(err))


def check(result, where: str):
    """Unpack a cuda-python result tuple, raising CudaError on failure."""
    err = result[0]
    if int(err) != 0:
        try:
            detail = api.cudaGetErrorString(err)[1].decode()
        except Exception:
            detail = ""
        raise CudaError(int(err), error_name(err), where, detail)
    return None if len(result) == 1 else result[1] if len(result) == 2 else result[1:]
