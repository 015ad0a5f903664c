"""How many threads per multiprocessor pyew's elementwise launches keep resident, per GPU model.

A streaming kernel at full occupancy can keep more reads in flight than a GPU's DRAM serves best.
Where a lower limit measured faster under sustained load (docs/tuning.md, "Occupancy caps
(resident threads per SM)"), the contiguous map kernels get it: the launch reserves shared memory it does not
use, so that fewer blocks fit on a multiprocessor (libew/elementwise.cuh, resident_cap_smem). GPUs
not listed keep the hardware's maximum: on an H200 every lower limit measured slower.
"""
from __future__ import annotations

# (compute capability, multiprocessors, memory bus width in bits) -> resident threads per SM
MEASURED = {
    ((9, 0), 132, 5120): 1792,      # H100 SXM5 80GB (HBM3)
}


def resident_threads(capability, sms: int, bus_width_bits: int, max_threads: int) -> int:
    """The resident threads per multiprocessor that launches on this GPU may use."""
    limit = MEASURED.get((tuple(capability), int(sms), int(bus_width_bits)), max_threads)
    return max(1, min(int(max_threads), limit))
