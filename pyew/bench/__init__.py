"""pyew's benchmark harness: `python -m pyew bench` (and `make bench`).

Modules: cli (options, the run), context (results, notes, progress, time limit), timing (CUDA event
timing, buffer rotation, wall clocks, sustained runs), warm (one call of every timed kernel before
timing), traffic (bytes moved, GB/s), data (fresh random device and host buffers), peers (PyTorch /
CuPy equivalents of each op, and the loaders of every peer), cpu_peers (numpy and numexpr), what is
measured: map_suites, api_suites, numpy_suite, host_suites; suites (the registry and run order);
report, report_host and fmt (tables, JSON, PNG); targets (pyew's performance targets).
Nothing here is imported by `import pyew`.
"""
