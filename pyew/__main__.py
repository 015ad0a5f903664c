"""python -m pyew COMMAND [ARGS]: pyew's command line. Commands are modules imported on use, so
`--help` works without the library, a GPU or the benchmark's optional peers."""
from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "bench": ("pyew.bench.cli", "benchmark every op against the copy ceiling, a naive kernel, "
                                "PyTorch and CuPy"),
}


def _usage() -> str:
    lines = ["usage: python -m pyew COMMAND [ARGS]", "", "commands:"]
    lines += [f"  {name:<8} {doc}" for name, (_, doc) in COMMANDS.items()]
    lines += ["", "python -m pyew COMMAND --help describes a command's options."]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    cmd = COMMANDS.get(argv[0])
    if cmd is None:
        print(f"python -m pyew: unknown command {argv[0]!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    return importlib.import_module(cmd[0]).main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
