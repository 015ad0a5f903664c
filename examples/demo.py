"""The main job in one screen: numpy in, fused activations on the GPU, numpy out, and the same on
data that stays on the GPU. Run: python examples/demo.py"""
import pathlib
import sys
import time

import numpy as np

try:
    import pyew
except ImportError:   # run from a checkout without installing: the package is one folder up
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
    import pyew

print("ops:", ", ".join(o["name"] for o in pyew.ops()))
try:
    info = pyew.device_info()
except pyew.NoDeviceError as e:       # the demo runs kernels: say why it cannot, without a traceback
    sys.exit(f"demo: {e}")
print(f"device: {info['name']} (sm_{info['capability'][0]}{info['capability'][1]}, {info['sms']} SMs)")

x = np.linspace(-5, 5, 11, dtype=np.float32)
print("gelu:", pyew.gelu(x))

rng = np.random.default_rng(0)
a = rng.standard_normal(1 << 24).astype(np.float16)
b = rng.standard_normal(1 << 24).astype(np.float16)
da, db = pyew.asarray(a), pyew.asarray(b)
y = pyew.add_relu(da, db)                       # stays on the GPU
pyew.synchronize()
t0 = time.perf_counter()
for _ in range(20):
    y = pyew.add_relu(da, db, out=y)
pyew.synchronize()
dt = (time.perf_counter() - t0) / 20
print(f"add_relu float16, 2^24 elements: {dt * 1e6:.0f} us/call, {3 * a.nbytes / dt / 1e9:.0f} GB/s")
ref = np.maximum(a.astype(np.float32) + b.astype(np.float32), 0).astype(np.float16)
assert np.array_equal(y.get(), ref), "add_relu disagrees with numpy"
print("add_relu matches numpy: ok")
