"""``rewards serve --host`` beyond loopback needs ``--token-env NAME`` (refused in one line,
exit 2, before Ray starts), and then every request must carry ``Authorization: Bearer``."""
from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest

from tests.rewards.serve_proc import REPO, free_port, rewards_service

pytestmark = pytest.mark.ray
TOKEN = "s3cret-token-for-the-test"


def _serve(*flags: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = dict(os.environ, PYTHONPATH=str(REPO), RAY_AUTH_MODE="disabled", **(env or {}))
    return subprocess.run([sys.executable, str(REPO / "jobs" / "rewards.py"), "serve", "--port", str(free_port()),
                           *flags], cwd=REPO, env=full, capture_output=True, text=True, timeout=120)


def test_an_exposed_host_without_a_token_is_refused_in_one_line():
    done = _serve("--host", "0.0.0.0")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--host 0.0.0.0" in lines[0] and "--token-env" in lines[0], done.stderr
    empty = _serve("--host", "0.0.0.0", "--token-env", "OPTEVAL_TEST_UNSET_TOKEN")
    assert empty.returncode == 2 and "OPTEVAL_TEST_UNSET_TOKEN" in empty.stderr and "Traceback" not in empty.stderr


def test_with_a_token_every_request_needs_the_bearer_header(tmp_path):
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with rewards_service(tmp_path / "serve.log", "--host", "0.0.0.0", "--token-env", "OPTEVAL_TEST_TOKEN",
                         "--min-executors", "1", "--max-executors", "1", "--num-cpus", "1",
                         env={"OPTEVAL_TEST_TOKEN": TOKEN}, headers=auth) as (url, proc):
        body = {"scheme": "correct", "items": [{"id": "a", "completion": "```python\nsubmit(3)\n```", "answer": 3}]}
        assert httpx.get(url, timeout=30).status_code == 401
        assert httpx.post(url, json=body, timeout=120).status_code == 401
        wrong = httpx.post(url, json=body, timeout=120, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and "Bearer" in wrong.json()["error"]["message"]
        ok = httpx.post(url, json=body, timeout=300, headers=auth)
        assert ok.status_code == 200 and ok.json()["rewards"][0]["correct"] is True, ok.text
    log = (tmp_path / "serve.log").read_text()
    assert TOKEN not in log  # the token is never printed
    # stopped by the context's SIGTERM: the documented exit code of an interrupted command
    assert proc.returncode == 130 and "rewards: stopped (signal 15)" in log, log[-2000:]
