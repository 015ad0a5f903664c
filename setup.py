"""Wheel and install build: `pip wheel .` / `pip install .` run the Makefile (nvcc needed) and ship
build/libew.so, its manifest and pyew's C extension inside the package as pyew/_lib/. The
generator is a build tool and is not installed. Set PYEW_SPEC="libew/ops.toml my_ops.toml" to build
other spec files in, and ARCH / NVCC / CUDA_HOME as for make.

The wheel is a platform wheel tagged for the C extension's stable ABI (cp311-abi3-<platform>):
libew.so is loaded with ctypes, not imported, and the extension is optional (pyew falls back to
ctypes where it cannot load), but both are built for this platform."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
BUILD = Path(os.environ.get("PYEW_BUILD") or os.environ.get("BUILD") or ROOT / "build")
BUILD = BUILD if BUILD.is_absolute() else ROOT / BUILD


class BuildWithLibew(build_py):
    def run(self):
        cmd = ["make", "-C", str(ROOT), "all", f"PYTHON={sys.executable}"]
        for var in ("SPEC", "ARCH", "NVCC", "CUDA_HOME", "BUILD"):
            value = os.environ.get(f"PYEW_{var}", os.environ.get(var) if var != "SPEC" else None)
            if value:
                cmd.append(f"{var}={value}")
        subprocess.run(cmd, check=True)
        super().run()               # after make, so that package data the build puts in pyew/ is globbed
        dest = Path(self.build_lib) / "pyew" / "_lib"
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("libew.so", "manifest.json"):
            shutil.copy2(BUILD / name, dest / name)
        ext = BUILD / "_ewcall.abi3.so"        # absent without the Python headers: pyew uses ctypes
        if ext.exists():
            shutil.copy2(ext, dest / ext.name)


class WithBinaries(Distribution):
    """Binaries inside the package: the wheel puts the package at its root (platlib), not under
    pyew-<version>.data/purelib/, and is tagged for this platform."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithLibew}, distclass=WithBinaries,
      # setuptools' staging folders go inside make's build folder, beside what they package
      options={"bdist_wheel": {"py_limited_api": "cp311"}, "build": {"build_base": str(BUILD / "setuptools")}})
