"""`python -m pyew bench` (cli: the suites of suites.py in harness, against peers and benchlib; report,
targets) and `python -m pyew bench-dask` (dask_scaling). `import pyew` imports none of it."""
