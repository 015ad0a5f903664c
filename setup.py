"""Wheel and install build: `pip wheel .` / `pip install .` run the Makefile (nvcc needed) and ship
build/libew.so, its manifest and pyew's C extension inside the package as pyew/_lib/, with what
run-time compiled kernels read (libew's headers, the ops' device functions, the spec files),
and the generator as pyew._generator (pyew.load_spec renders spec files with it). Set
PYEW_SPEC="libew/ops.toml my_ops.toml" to build other spec files in, and ARCH / NVCC / CUDA_HOME
as for make.

The wheel is a platform wheel tagged for the C extension's stable ABI (cp311-abi3-<platform>):
libew.so is loaded with ctypes, not imported, and the extension is optional (pyew falls back to
ctypes where it cannot load), but both are built for this platform."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Distribution, find_packages, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
BUILD = Path(os.environ.get("PYEW_BUILD") or ROOT / "build")
BUILD = BUILD if BUILD.is_absolute() else ROOT / BUILD


class BuildWithLibew(build_py):
    def run(self):
        cmd = ["make", "-C", str(ROOT), "all", f"PYTHON={sys.executable}"]
        for var in ("SPEC", "ARCH", "NVCC", "CUDA_HOME", "BUILD"):
            # only PYEW_-prefixed: conda's compiler activation exports BUILD, build systems ARCH
            value = os.environ.get(f"PYEW_{var}", os.environ.get(var) if var in ("NVCC", "CUDA_HOME") else None)
            if value:
                cmd.append(f"{var}={value}")
        subprocess.run(cmd, check=True)
        super().run()               # after make, so that package data the build puts in pyew/ is globbed
        dest = Path(self.build_lib) / "pyew" / "_lib"
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("libew.so", "manifest.json"):
            shutil.copy2(BUILD / name, dest / name)
        ext = BUILD / "_ewcall.abi3.so"        # absent without the Python headers: pyew uses ctypes
        (dest / ext.name).unlink(missing_ok=True)      # not an earlier build's, left in build_lib
        if ext.exists():
            shutil.copy2(ext, dest / ext.name)
        # read at run time: libew's headers and the ops' device functions by NVRTC (fused formulas,
        # pyew.load_spec), the spec files the library was built from by pyew.load_spec
        include = dest / "include"
        shutil.rmtree(include, ignore_errors=True)
        (include / "fn").mkdir(parents=True)
        for h in sorted([*(ROOT / "libew").glob("*.cuh"), *(ROOT / "libew").glob("*.h")]):
            shutil.copy2(h, include / h.name)
        for h in sorted((BUILD / "gen" / "fn").glob("*.cuh")):
            shutil.copy2(h, include / "fn" / h.name)
        specs = dest / "spec"
        shutil.rmtree(specs, ignore_errors=True)
        for f in json.loads((BUILD / "manifest.json").read_text())["spec_files"]:
            recorded = Path(f["path"])
            target = specs / (recorded.name if recorded.is_absolute() else recorded)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(recorded if recorded.is_absolute() else ROOT / recorded, target)


class WithBinaries(Distribution):
    """Binaries inside the package: the wheel puts the package at its root (platlib), not under
    pyew-<version>.data/purelib/, and is tagged for this platform."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithLibew}, distclass=WithBinaries,
      # the generator ships inside the package as pyew._generator, for pyew.load_spec
      packages=[*find_packages(include=["pyew", "pyew.*"]), "pyew._generator"],
      package_dir={"pyew._generator": "generator"},
      package_data={"pyew._generator": ["templates/*.mako"]},
      # setuptools' staging folders go inside make's build folder, beside what they package
      options={"bdist_wheel": {"py_limited_api": "cp311"}, "build": {"build_base": str(BUILD / "setuptools")}})
