"""Wheel and install build: `pip wheel .` / `pip install .` run the Makefile (nvcc needed) and ship
build/libew.so, its manifest and pyew's C extension inside the package as pyew/_lib/. The
generator is a build tool and is not installed. Set PYEW_SPEC="libew/ops.toml my_ops.toml" to build
other spec files in, and ARCH / NVCC / CUDA_HOME as for make."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:                     # setuptools < 70
    from wheel.bdist_wheel import bdist_wheel

ROOT = Path(__file__).resolve().parent


class BuildWithLibew(build_py):
    def run(self):
        super().run()
        cmd = ["make", "-C", str(ROOT), "all", f"PYTHON={sys.executable}"]
        for var in ("SPEC", "ARCH", "NVCC", "CUDA_HOME", "BUILD"):
            value = os.environ.get(f"PYEW_{var}", os.environ.get(var) if var != "SPEC" else None)
            if value:
                cmd.append(f"{var}={value}")
        subprocess.run(cmd, check=True)
        build = Path(os.environ.get("PYEW_BUILD") or os.environ.get("BUILD") or ROOT / "build")
        if not build.is_absolute():
            build = ROOT / build
        dest = Path(self.build_lib) / "pyew" / "_lib"
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("libew.so", "manifest.json"):
            shutil.copy2(build / name, dest / name)
        ext = build / "_ewcall.abi3.so"        # absent without the Python headers: pyew uses ctypes
        if ext.exists():
            shutil.copy2(ext, dest / ext.name)


class PlatformWheel(bdist_wheel):
    """libew.so is loaded with ctypes, not imported, and the C extension (stable ABI) is optional:
    pyew falls back to ctypes where it cannot load. Any Python 3, this platform."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        _, _, plat = super().get_tag()
        return "py3", "none", plat


setup(cmdclass={"build_py": BuildWithLibew, "bdist_wheel": PlatformWheel})
