"""A small run of every kernel of the library on odd sizes and misaligned views, meant to be run
under compute-sanitizer (memcheck) on a GPU machine: any out-of-bounds access is reported there."""
import numpy as np

import pyew

rng = np.random.default_rng(1)
count = 0
for info in pyew.library.get().manifest["ops"]:
    if info["kind"] != "map":
        continue
    fn = getattr(pyew, info["name"])
    params = {p["name"]: (p["default"] if p["default"] is not None else 1.5) for p in info["params"]}
    for k in info["kernels"]:
        dt = pyew.dtypes.BY_NAME[k["dtype"]]
        for n in (1, 7, 33, 4099):
            arrays = []
            for j in range(len(info["inputs"])):
                a = (rng.integers(-50, 50, n + 3) if dt.kind == "int" else rng.standard_normal(n + 3)).astype(dt.np)
                arrays.append(pyew.asarray(a)[j % 3:j % 3 + n])
            out = pyew.empty(n + 1, k["out_dtype"])[1:]
            fn(*arrays, out=out, **params)
            count += 1
pyew.synchronize()
print(f"sanitize smoke: {count} launches done")
