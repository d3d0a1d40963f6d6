"""opteval without its checkout: build the wheel, install it into a fresh virtual environment,
and run the demo, a report and the viewer from an empty folder (configs, prompts, the sample
benchmark and the viewer's templates come from the wheel). The venv borrows the installed
dependencies (--system-site-packages) so the test installs only opteval itself; the test then
checks every opteval module is imported from the venv, never from the checkout."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.package


def run(cmd: list[str], cwd: Path, timeout: float = 900, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OPTEVAL_CONFIGS")}
    done = subprocess.run(cmd, cwd=str(cwd), env={**clean, "RAY_AUTH_MODE": "disabled",
                                                 "RAY_USAGE_STATS_ENABLED": "0", **env},
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{cmd}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_wheel_runs_the_demo_from_an_empty_folder(tmp_path):
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "-q", "-w", str(dist)], tmp_path)
    wheel = next(dist.glob("opteval-*.whl"))
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    run([str(py), "-m", "pip", "install", "--no-deps", "-q", str(wheel)], tmp_path)
    work = tmp_path / "empty"
    work.mkdir()
    # one import namespace: the wheel installs `opteval` and no generic top-level name
    with zipfile.ZipFile(wheel) as zf:
        top = {n.split("/")[0] for n in zf.namelist() if not n.split("/")[0].endswith((".dist-info", ".data"))}
        top_level = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/top_level.txt"))).decode().split()
    assert top == {"opteval"} and top_level == ["opteval"], (top, top_level)
    where = run([str(py), "-c", "import opteval.evalcore, opteval.cluster, opteval.jobs; "
                 "from opteval.sweepcore.config import configs_dir; print(opteval.evalcore.__file__); "
                 "print(opteval.cluster.__file__); print(opteval.jobs.__file__); print(configs_dir())"], work)
    for line in where.stdout.split():
        assert Path(line).is_relative_to(env_dir) and not Path(line).is_relative_to(REPO), where.stdout
    opteval = str(env_dir / "bin" / "opteval")
    sweep = run([opteval, "sweep", "limit_problems=2", f"serving.http_port={free_port()}"], work)
    assert "planned" in sweep.stdout and (work / "results").is_dir()
    run([opteval, "report", "--summary"], work)
    assert "usage" in run([str(py), "-m", "opteval", "--help"], work).stdout.lower()
    view = run([opteval, "view"], work)
    index = next(work.glob("results/*/view/index.html"))
    assert f"view written to {index}" in view.stdout
    # a user's own configs/ folder replaces the shipped one
    own = work / "configs"
    run([str(py), "-c", f"import shutil, opteval, pathlib; shutil.copytree(pathlib.Path(opteval.__file__)"
                        f".parent / 'configs', {str(own)!r})"], work)
    (own / "methods" / "direct.yaml").write_text((own / "methods" / "direct.yaml").read_text() + "\nbogus_key: 1\n")
    bad = subprocess.run([opteval, "sweep", "plan_only=true"], cwd=str(work), capture_output=True, text=True,
                         env={**os.environ, "RAY_AUTH_MODE": "disabled"}, timeout=300)
    assert bad.returncode == 2 and str(own / "methods" / "direct.yaml") in bad.stderr + bad.stdout
