"""pyew's exceptions. Every CUDA failure surfaces as CudaError, carrying the CUDA error's name."""
from __future__ import annotations


class PyewError(RuntimeError):
    """Base class of pyew's own errors."""


class SpecError(PyewError, ValueError):
    """A spec file pyew.load_spec cannot take; the message names the file, the op and the field."""


class CompileError(PyewError):
    """NVRTC could not compile a formula's kernel or a loaded spec op; the message names the formula
    (or the spec file, op and field) and gives NVRTC's log."""


class LibraryError(PyewError):
    """libew.so is missing, stale or built for another pyew; the message says to run `make all`."""


class NoDeviceError(PyewError):
    """No usable CUDA GPU or driver."""


class CudaError(PyewError):
    """A CUDA call or kernel launch failed."""

    def __init__(self, code: int, name: str, where: str, detail: str = ""):
        self.code = int(code)
        self.name = name
        self.where = where
        msg = f"{where} failed: {name} ({self.code})"
        if detail:
            msg += f": {detail}"
        super().__init__(msg)
