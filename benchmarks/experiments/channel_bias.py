"""One-off experiment (2026-11-27): numpy calls with channel biases, (N, C, H, W) + (C, 1, 1), wall
time per call, one tree per process (`old` or `new`, named in the output; PyTorch's round trip in
the `new` processes only). The former tree from `git archive <rev> pyew | tar -x -C /tmp/old`, with
links to this checkout's build/ and libew/, run as `PYTHONPATH=/tmp/old python
benchmarks/experiments/channel_bias.py old`, alternating with `... channel_bias.py new` here."""
# ruff: noqa
import sys, time, statistics
import numpy as np
import pyew
tag = sys.argv[1]
try:
    import torch
except Exception:
    torch = None
rng = np.random.default_rng(0)
C = 64
shapes = {16: (1, 16, 64, 64), 20: (4, 64, 64, 64), 22: (16, 64, 64, 64), 24: (64, 64, 64, 64)}
res = {}
for k, shape in shapes.items():
    c = shape[1]
    x = rng.standard_normal(shape).astype(np.float32)
    s = rng.standard_normal((c, 1, 1)).astype(np.float32)
    b = rng.standard_normal((c, 1, 1)).astype(np.float32)
    calls = {
        "sigmoid(x)": lambda: pyew.sigmoid(x),
        "add(x, b) channel": lambda: pyew.add(x, b),
        "evaluate x*s+b channel": lambda: pyew.evaluate("x * s + b", local_dict={"x": x, "s": s, "b": b}),
    }
    if torch is not None and tag == "new":
        bt = torch.from_numpy(b).cuda()
        calls["torch round trip x + b"] = lambda: (torch.from_numpy(x).cuda() + bt).cpu().numpy()
    want = x + b
    assert np.array_equal(pyew.add(x, b), want)
    got = pyew.evaluate("x * s + b", local_dict={"x": x, "s": s, "b": b})
    assert np.allclose(got, x * s + b, rtol=1e-6, atol=1e-6)
    reps = {16: 200, 20: 50, 22: 20, 24: 6}[k]
    for f in calls.values():
        for _ in range(3):
            f()
    for rnd in range(7):
        for name, f in calls.items():
            t0 = time.perf_counter()
            for _ in range(reps):
                f()
            res.setdefault((k, name), []).append((time.perf_counter() - t0) / reps * 1e3)
for (k, name), v in res.items():
    print(f"{tag}\t2^{k}\t{name}\t{statistics.median(v):.4f} ms")
