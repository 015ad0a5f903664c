"""pyew's benchmark harness: `python -m pyew bench` (and `make bench`).

Modules: cli (options, the run), context (results, notes, progress, time limit), timing (CUDA event
timing, buffer rotation, wall clocks), traffic (bytes moved, GB/s), data (fresh random device
buffers), peers (PyTorch / CuPy equivalents of each op), map_suites and api_suites (what is
measured), suites (the registry and run order), report (table, JSON, PNG), targets (the issue's bar).
Nothing here is imported by `import pyew`.
"""
