"""Names of pyew's own API: a spec op may not take one of these (it would shadow the function)."""
RESERVED = frozenset({
    "asarray", "empty", "zeros", "ops", "device_info", "Stream", "DeviceArray", "PyewError",
    "CudaError", "LibraryError", "NoDeviceError", "synchronize", "current_stream", "dtypes",
    "names", "errors", "runtime", "array", "library", "opcall", "kinds", "bench", "version",
})
