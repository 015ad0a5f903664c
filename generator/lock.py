"""python -m generator.lock LOCKFILE -- COMMAND [ARGS...]

Runs COMMAND holding an exclusive lock on LOCKFILE (created if missing), so that two `make all`
runs into one build folder take turns instead of interleaving: each generates from its own SPEC
and builds, and neither can report success with the other's ops. A run that finds the lock held
says so and waits. COMMAND replaces this process and inherits the lock, as do its children; the
lock is released when the last of them exits. A COMMAND that runs this again with the same
LOCKFILE (a nested make) does not wait for itself.
"""
from __future__ import annotations

import fcntl
import os
import sys

_HELD = "EW_BUILD_LOCK"


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 3 or args[1] != "--":
        print("usage: python -m generator.lock LOCKFILE -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    path, cmd = os.path.abspath(args[0]), args[2:]
    if os.environ.get(_HELD) != path:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            print(f"error: cannot create the build lock {path}: {e.strerror or e}", file=sys.stderr)
            return 1
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another build in {os.path.dirname(path)} to finish ...", file=sys.stderr, flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.set_inheritable(fd, True)
        os.environ[_HELD] = path
    try:
        os.execvp(cmd[0], cmd)
    except OSError as e:
        print(f"error: cannot run {cmd[0]}: {e.strerror or e}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
