"""The Makefile around the generator, without compiling anything: a clear message when nvcc is
missing, spec paths with spaces, the build command the manifest records, and the build lock."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mako", reason="mako (the generator's template engine) is not installed")
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make not found")

ROOT = Path(__file__).resolve().parent.parent


def make(*args, env=None, **kw):
    e = dict(os.environ, **(env or {}))
    for var in ("CUDA_HOME", "NVCC", "SPEC", "BUILD", "ARCH", "MAKEFLAGS", "MFLAGS", "MAKELEVEL"):
        if var not in (env or {}):
            e.pop(var, None)
    return subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, capture_output=True, text=True, env=e,
                          **kw)


def test_missing_nvcc_says_what_to_install(tmp_path):
    r = make("all", f"BUILD={tmp_path / 'b'}", "NVCC=/nonexistent/bin/nvcc")
    assert r.returncode != 0
    assert "error: nvcc not found (NVCC=/nonexistent/bin/nvcc): install the CUDA toolkit" in r.stderr
    assert "CUDA_HOME" in r.stderr and "Error 127" not in r.stderr
    assert not (tmp_path / "b").exists()          # checked before anything is generated


def test_wrong_cuda_home_says_what_to_set(tmp_path):
    r = make("all", f"BUILD={tmp_path / 'b'}", env={"CUDA_HOME": str(tmp_path / "cuda")})
    assert r.returncode != 0
    assert f"error: CUDA_HOME={tmp_path / 'cuda'} has no bin/nvcc" in r.stderr
    assert not (tmp_path / "b").exists()


def test_spec_path_with_spaces_and_the_recorded_build_command(tmp_path):
    spaced = tmp_path / "my ops" / "extra ops.toml"
    spaced.parent.mkdir()
    spaced.write_text((ROOT / "examples/my_ops.toml").read_text())
    build = tmp_path / "b"
    r = make("generate", f'SPEC=libew/ops.toml "{spaced}"', f"BUILD={build}",
             "ARCH=-gencode arch=compute_90,code=sm_90", "JOBS=1")
    assert r.returncode == 0, r.stderr
    man = json.loads((build / "manifest.json").read_text())
    assert [f["path"] for f in man["spec_files"]] == ["libew/ops.toml", spaced.resolve().as_posix()]
    assert man["build_command"] == (f"make all SPEC='libew/ops.toml \"{spaced.resolve().as_posix()}\"' "
                                    f"BUILD={build.resolve().as_posix()} ARCH=\"-gencode arch=compute_90,code=sm_90\"")
    assert (build / "gen/ew_softplus_f16.cu").exists()


def test_a_second_build_into_the_same_folder_waits_for_the_first(tmp_path):
    build = tmp_path / "b"
    holder = subprocess.Popen([sys.executable, "-m", "generator.lock", str(build / ".lock"), "--", sys.executable,
                               "-c", "import time; print('held', flush=True); time.sleep(2)"],
                              cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"      # the lock is taken
        t0 = time.monotonic()
        r = make("generate", f"BUILD={build}")
        waited = time.monotonic() - t0
    finally:
        holder.communicate()
    assert r.returncode == 0, r.stderr
    assert f"waiting for another build in {build} to finish" in r.stderr
    assert waited >= 0.5 and (build / "manifest.json").exists()


def test_lock_is_not_taken_twice_by_a_nested_make(tmp_path):
    lock = tmp_path / ".lock"
    r = subprocess.run([sys.executable, "-m", "generator.lock", str(lock), "--", sys.executable, "-m",
                        "generator.lock", str(lock), "--", "echo", "inner"], cwd=ROOT, capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0 and r.stdout.strip() == "inner" and "waiting" not in r.stderr


def test_concurrent_builds_with_different_specs_take_turns(tmp_path):
    """Each `make generate` holds the lock from generating to the end: the folder always holds one
    spec's complete output, never a mix."""
    build = tmp_path / "b"
    mine = tmp_path / "mine.toml"
    mine.write_text((ROOT / "examples/my_ops.toml").read_text())
    env = dict(os.environ)
    for var in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL"):
        env.pop(var, None)
    procs = [subprocess.Popen(["make", "--no-print-directory", "generate", f"BUILD={build}", spec], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for spec in ("SPEC=libew/ops.toml", f"SPEC=libew/ops.toml {mine}")]
    for p in procs:
        p.communicate(timeout=120)
        assert p.returncode == 0
    man = json.loads((build / "manifest.json").read_text())
    has_mine = any(o["name"] == "softplus" for o in man["ops"])
    assert (build / "gen/ew_softplus_f32.cu").exists() == has_mine
    assert ("softplus" in (build / "gen/sources.mk").read_text()) == has_mine
