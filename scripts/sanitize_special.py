"""Every special kernel (relu_mask, its backward, upsample_nearest2d both ways, dot,
scatter_add and its check) on odd sizes and misaligned views, small enough to run under
compute-sanitizer:
    compute-sanitizer --tool memcheck python3 scripts/sanitize_special.py
    compute-sanitizer --tool racecheck python3 scripts/sanitize_special.py
Any out-of-bounds access (a tail read past n, a paired atomic outside dst) is reported there."""
import numpy as np

import pyew

rng = np.random.default_rng(1)
count = 0


def view(a, off):
    """A device view `off` elements (rows) into a buffer sized exactly for it: nothing follows it."""
    pad = np.concatenate([np.zeros((off,) + a.shape[1:], a.dtype), a]) if off else a
    return pyew.asarray(pad)[off:]


for dtype in ("float32", "float64", "float16", "bfloat16"):
    npd = pyew.dtypes.BY_NAME[dtype].np
    for n in (1, 7, 33, 100, 4099):
        for off in (0, 1, 3):
            x = view(rng.standard_normal(n).astype(npd), off)
            a = view(rng.standard_normal(n).astype(npd), (off + 1) % 4)
            y, mask = pyew.relu_mask(x)
            pyew.add_relu_mask(x, a, out=(pyew.empty(n + 1, dtype)[1:], None))
            pyew.relu_mask_backward(a, mask, out=pyew.empty(n + off, dtype)[off:])
            pyew.dot(x, a)
            dst = view(np.zeros(n, npd), off)                 # ends exactly at its buffer's end
            idx = rng.integers(-n, n, 3 * n)
            idx[:2] = (0, n - 1)
            pyew.scatter_add(dst, pyew.asarray(idx.astype(np.int32)),
                             pyew.asarray(rng.standard_normal(3 * n).astype(npd)))
            pyew.scatter_add(dst, idx, rng.standard_normal(3 * n).astype(npd))
            count += 6
    for shape, kw in (((2, 3, 5, 7), {}), ((1, 2, 4, 8), {}), ((2, 1, 3, 5), {"scale": 3}),
                      ((2, 3, 5, 7), {"output_size": (11, 4)})):
        for off in (0, 1):
            x = view(rng.standard_normal(shape).astype(npd), off)
            y = pyew.upsample_nearest2d(x, **kw)
            bkw = {"input_size": shape[2:]} if "output_size" in kw else kw
            pyew.upsample_nearest2d_backward(view(y.get(), off), **bkw)
            count += 2
pyew.synchronize()
print(f"sanitize special: {count} launches done")
