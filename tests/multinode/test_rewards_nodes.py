"""The reward service on a 3-node Ray cluster (``ray start`` three times on this machine):
its executors spread one a node, a batch is scored on all three, asking for more
executors than the nodes hold is refused before anything is deployed, and a stopped service
takes its app off the cluster it joined.

Not in the README test command: three raylets and a Serve app take a minute or two. Run with
    OPTEVAL_MULTINODE=1 python -m pytest -q -m multinode tests/multinode
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import pytest

from opteval.cluster.runtime import EXECUTOR_RESOURCE
from tests.fake_nodes import Node, fake_cluster
from tests.rewards.serve_proc import REPO, free_port, rewards_service

pytestmark = [pytest.mark.multinode, pytest.mark.integration,
              pytest.mark.skipif(os.environ.get("OPTEVAL_MULTINODE") != "1",
                                 reason="multinode tier: set OPTEVAL_MULTINODE=1 (starts a 3-node Ray cluster)")]

# ORLM's shape: prose, then one coptpy block; the orlm profile reads the Model's objective.
PROGRAM = '''## Mathematical Model:
max {a}x+{b}y, x+y <= {cap}

```python
import coptpy as cp
from coptpy import COPT
env = cp.Envr()
model = env.createModel("lp")
x = model.addVar(lb=0, name="x")
y = model.addVar(lb=0, name="y")
model.addConstr(x + y <= {cap})
model.setObjective({a} * x + {b} * y, COPT.MAXIMIZE)
model.solve()
```'''


def _items(n: int) -> tuple[list[dict], int]:
    """``n`` small LPs, every fourth answer key wrong (so ``correct`` is checked, not assumed)."""
    items, right = [], 0
    for i in range(n):
        a, b, cap = 2 + i % 5, 3 + i % 3, 4 + i % 7
        optimum = max(a, b) * cap
        wrong = i % 4 == 3
        right += not wrong
        items.append({"id": f"p{i}", "completion": PROGRAM.format(a=a, b=b, cap=cap),
                      "answer": optimum * 2 + 7 if wrong else optimum})
    return items, right


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as resp:
        return json.loads(resp.read())


def _runner_replicas(dashboard: str) -> list[dict]:
    """The sandbox runner's replicas as Serve's REST API reports them (state, node_id)."""
    with urllib.request.urlopen(f"{dashboard}/api/serve/applications/", timeout=30) as resp:
        details = json.loads(resp.read())
    app = details["applications"]["opteval-rewards"]
    return app["deployments"]["SandboxRunner"]["replicas"]


@pytest.mark.timeout(900)
def test_executors_spread_one_a_node_and_score_a_batch(tmp_path):
    node = Node(cpus=1, resources={EXECUTOR_RESOURCE: 1})
    with fake_cluster([node, node, node], dashboard=True, prefix="rw-") as cluster:
        assert cluster.dashboard is not None
        env = dict(cluster.env, PYTHONPATH=str(REPO))
        # more executors than three nodes hold at one a node: refused, naming the flags, nothing deployed
        refused = subprocess.run([sys.executable, str(REPO / "jobs" / "rewards.py"), "serve", "--port", str(free_port()),
                                  "--address", cluster.address, "--min-executors", "4", "--max-executors", "4",
                                  "--executors-per-node", "1"], env=env, cwd=REPO, capture_output=True, text=True,
                                 timeout=300)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "--min-executors/--initial-executors 4: the cluster holds 3 executor(s)" in refused.stderr

        log = tmp_path / "serve.log"
        with rewards_service(log, "--address", cluster.address, "--min-executors", "3", "--max-executors", "3",
                             "--executors-per-node", "1", "--slots", "2") as (url, _):
            items, right = _items(48)
            body = _post(url, {"scheme": "correct", "extraction": "orlm", "grading": "orlm", "items": items})
            rewards = body["rewards"]
            assert body["errors"] == 0 and [r["error"] for r in rewards] == [None] * len(items)
            assert [r["id"] for r in rewards] == [it["id"] for it in items]
            assert sum(r["correct"] for r in rewards) == right
            replicas = _runner_replicas(cluster.dashboard)
            running = [r for r in replicas if r["state"] == "RUNNING"]
            assert len(running) == 3, replicas
            assert len({r["node_id"] for r in running}) == 3, [r["node_id"] for r in running]
        assert "at most 1 a node" in log.read_text()
        # stopped: its app is taken off the cluster it joined (the cluster itself stays up)
        with urllib.request.urlopen(f"{cluster.dashboard}/api/serve/applications/", timeout=30) as resp:
            assert "opteval-rewards" not in json.loads(resp.read()).get("applications", {})
