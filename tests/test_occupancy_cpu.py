"""The resident-thread budget of launches per GPU model, and how it reaches the entry points."""
from __future__ import annotations

import dataclasses

from pyew import occupancy
from pyew import runtime as rt


def test_measured_models_get_their_limit_and_others_the_hardware_maximum():
    assert occupancy.resident_threads((9, 0), 132, 5120, 2048) == 1792          # H100 SXM5
    assert occupancy.resident_threads([9, 0], 132, 5120, 2048) == 1792          # capability as a list
    assert occupancy.resident_threads((9, 0), 132, 6144, 2048) == 2048          # H200: uncapped
    assert occupancy.resident_threads((9, 0), 114, 5120, 2048) == 2048          # H100 PCIe: not measured
    assert occupancy.resident_threads((8, 9), 128, 256, 1536) == 1536
    assert occupancy.resident_threads((9, 0), 132, 5120, 1024) == 1024          # never above the hardware


def test_device_props_pass_the_budget_as_the_launch_argument():
    p = rt.DeviceProps(0, "fake", (9, 0), 132, 2048, 1 << 30, 1 << 20, None)
    assert p.launch_threads_per_sm == 2048 and p.dims == (132, 2048)
    q = dataclasses.replace(p, launch_threads_per_sm=1536)
    assert q.threads_per_sm == 2048 and q.dims == (132, 1536)
