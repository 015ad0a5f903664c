"""pyew's version: pyproject.toml's in a checkout, the installed distribution's otherwise."""
from __future__ import annotations

from pathlib import Path


def _version() -> str:
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    if pyproject.exists():
        import tomllib
        try:
            return tomllib.loads(pyproject.read_text())["project"]["version"]
        except (KeyError, ValueError, OSError):
            pass
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("pyew")
    except PackageNotFoundError:
        return "unknown"


__version__ = _version()
