"""Install what pyew needs into the running Python, from pyproject.toml (the one list of
dependencies): `python scripts/deps.py GROUP ...`, where a group is `run` (the package's own
dependencies) or an optional-dependencies extra (`build`, `test`). Already satisfied requirements
cost one metadata lookup each, so `make` runs this every time."""
from __future__ import annotations

import subprocess
import sys

if sys.version_info < (3, 11):      # before tomllib's import fails with a traceback
    sys.exit(f"pyew needs Python 3.11 or newer; this is {sys.version.split()[0]} ({sys.executable}): make it use "
             "another with PYTHON=python3.12 (make test PYTHON=...), or a virtual environment of a newer Python")

import tomllib  # noqa: E402
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def requirements(groups) -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project.get("optional-dependencies", {})
    reqs = []
    for g in groups:
        if g == "run":
            reqs += project["dependencies"]
        elif g in extras:
            reqs += extras[g]
        else:
            raise SystemExit(f"error: unknown dependency group {g!r}; groups: run, {', '.join(extras)}")
    return list(dict.fromkeys(reqs))


def satisfied(req: str) -> bool:
    try:
        from pip._vendor.packaging.requirements import Requirement  # pip is in every venv
    except ImportError:
        Requirement = None
    if Requirement is None:
        name = req.split(";")[0].split("[")[0]
        for ch in "<>=!~ ":
            name = name.split(ch)[0]
        try:
            metadata.version(name)
            return True
        except metadata.PackageNotFoundError:
            return False
    r = Requirement(req)
    if r.marker is not None and not r.marker.evaluate():
        return True
    try:
        have = metadata.version(r.name)
    except metadata.PackageNotFoundError:
        return False
    return r.specifier.contains(have, prereleases=True)


def main(argv) -> int:
    missing = [r for r in requirements(argv) if not satisfied(r)]
    if not missing:
        return 0
    print(f"installing into {sys.prefix}: {' '.join(missing)}", flush=True)
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", *missing])
    if r.returncode:
        print("error: pip could not install pyew's dependencies (above). In a system Python that refuses "
              "pip installs (PEP 668), make a virtual environment first: python3 -m venv .venv && "
              ". .venv/bin/activate", file=sys.stderr)
    return r.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
