"""Bytes each measured call must move through device memory, and the rates derived from them.

Every figure counts each input read once and each output written once (the fewest bytes the op can
move), so pyew, the naive kernel, PyTorch and CuPy are compared on the same work: a peer that makes
extra passes (torch's relu(x + y) is two kernels) shows as a lower effective GB/s, not as more bytes.
"""
from __future__ import annotations

from .. import dtypes as dt


def itemsize(dtype: str) -> int:
    return dt.BY_NAME[dtype].itemsize


def map_bytes(n: int, in_dtypes, out_dtype: str) -> int:
    """An elementwise op over n elements: every input read, the output written."""
    return n * (sum(itemsize(d) for d in in_dtypes) + itemsize(out_dtype))


def copy_bytes(nbytes: int) -> int:
    """A device-to-device copy of nbytes reads nbytes and writes nbytes."""
    return 2 * nbytes


def nbytes_of(*objs) -> int:
    """Bytes held by arrays (DeviceArray, numpy, torch, CuPy), tuples/lists of them, or None."""
    total = 0
    for o in objs:
        if o is None:
            continue
        if isinstance(o, (tuple, list)):
            total += nbytes_of(*o)
        elif hasattr(o, "nbytes"):
            total += int(o.nbytes)
        elif hasattr(o, "element_size"):          # torch.Tensor has no .nbytes before 1.11
            total += int(o.numel()) * int(o.element_size())
    return total


def bytes_of_call(call) -> int:
    """Run `call` (a functools.partial) once: the bytes of its arguments and of what it returns."""
    return nbytes_of(*call.args, call())


def gbps(nbytes: int, ms: float | None) -> float | None:
    """GB/s with GB = 1e9 bytes (the unit bandwidth datasheets use)."""
    if not ms or ms <= 0:
        return None
    return nbytes / (ms * 1e6)


def pct(value: float | None, ceiling: float | None) -> float | None:
    if value is None or not ceiling:
        return None
    return 100.0 * value / ceiling
