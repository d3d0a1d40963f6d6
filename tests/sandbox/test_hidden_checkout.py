"""Issue 41: the README's test command as root from a clone whose parent is mode 0700 (``/root``,
``mktemp -d``): the unprivileged fork server must import ``opteval.evalcore`` from behind that hidden
ancestor, as it does from a wheel. A copy of the package in a 0700 folder is started through the
real launcher (setpriv to uid 65534, a private mount namespace) and runs a program."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from opteval.evalcore.sandbox.asuser import NOBODY, _hidden_ancestors, unprivileged_launcher

REPO = Path(__file__).resolve().parents[2]

RUN = """
from opteval.evalcore.sandbox.asuser import NOBODY, _hidden_ancestors, unprivileged_launcher, package_root
from opteval.evalcore.sandbox.host import ForkServer
launcher, why = unprivileged_launcher(NOBODY)
fs = ForkServer(pool_size=1, launcher=launcher)
fs.start()
r = fs.run_program("import os\\nsubmit(40 + 2)\\nprint(os.getuid())")
print("root", package_root())
print("result", r.outcome, r.submission, r.stdout.strip())
fs.close()
"""


def test_the_unprivileged_fork_server_imports_a_checkout_behind_a_0700_folder(tmp_path, request):
    launcher, why = unprivileged_launcher(NOBODY)
    if launcher is None:
        pytest.skip(f"cannot start a fork server as uid {NOBODY}: {why}")
    hidden_prefix = _hidden_ancestors(os.path.realpath(sys.prefix), NOBODY, NOBODY)
    # a clone beside the Python installation under its hidden ancestor (/root here, where pyenv
    # lives): the case that failed; elsewhere a 0700 folder of its own
    hidden = Path(tempfile.mkdtemp(dir=hidden_prefix[0] if hidden_prefix else tmp_path, prefix="opteval-clone-"))
    request.addfinalizer(lambda: shutil.rmtree(hidden, ignore_errors=True))
    clone = hidden / "clone"
    shutil.copytree(REPO / "opteval", clone / "opteval", ignore=shutil.ignore_patterns("__pycache__"))
    for d, _, files in os.walk(clone):  # a clone as git makes it: readable, behind a private parent
        os.chmod(d, 0o755)
        for f in files:
            os.chmod(os.path.join(d, f), 0o644)
    os.chmod(hidden, 0o700)
    done = subprocess.run([sys.executable, "-c", RUN], cwd=str(clone), capture_output=True, text=True, timeout=180,
                          env=dict(os.environ, PYTHONPATH=str(clone)))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert f"root {clone}" in done.stdout  # the copy behind the 0700 folder, not this checkout
    assert "result ok 42 " in done.stdout, done.stdout + done.stderr[-2000:]
