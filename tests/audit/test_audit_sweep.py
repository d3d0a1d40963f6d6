"""Issue 37, measured on real simulated sweeps (integration tier: Ray, Serve and the sandbox in a
subprocess; listed in tests/integration_tests.txt).

Three simulated models of different skill (p_correct 0.8, 0.6, 0.4) x direct, opticycle x the 46
sample problems x 3 samples. The sample's keys are right by construction (reference programs): no
suspect. Then the keys of k = 5 problems are changed on purpose (5 draws): the changed problems
``consensus`` flags (recall) and the flags among them (precision). docs/results.md has the figures."""
from __future__ import annotations

import random
import socket
from pathlib import Path

import pytest

from opteval.evalcore import audit as A
from opteval.evalcore.problems import load_benchmark
from tests.cli_runner import run
from tests.configs_with import write_configs

SKILLS = {"sim-a": 0.8, "sim-b": 0.6, "sim-c": 0.4}


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def multi(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("audit")
    configs = write_configs(root / "configs", {
        f"models/{name}.yaml": f"name: {name}\nbackend: simulated\nfamily: simulated\nsize_b: null\n"
                               f"simulated:\n  p_correct: {p}\n  ttft_s: 0.0\n  tokens_per_s: 0\nsampling: {{}}\n"
        for name, p in SKILLS.items()})
    env = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "OPTEVAL_CONFIGS": str(configs)}
    done = run("sweep", "sweep.name=multi", f"sweep.output_dir={root}", f"models=[{','.join(SKILLS)}]",
               "methods=[direct,opticycle]", "benchmarks=[sample]", "samples.default=3", "cluster.workers=2",
               "cluster.executors=2", f"serving.http_port={_port()}", "tracking.enabled=false",
               env=env, cwd=root, timeout=900, form="cli")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return root


def test_consensus_on_a_simulated_multi_model_sweep(multi, capsys):
    from opteval.jobs import audit as job

    out = multi / "audit"
    assert job.main(["sweep.name=multi", f"sweep.output_dir={multi}", "--out", str(out)]) == 0
    capsys.readouterr()
    from opteval.sweepcore.ledger import Ledger

    col = A.Collector()
    for batch in Ledger.open_existing(str(multi), "multi").scan(A.LEDGER_COLUMNS):
        col.add_batch(batch)
    keys = {pid: A.parse_key(v) for pid, v in load_benchmark("sample")[1].answers.items()}
    rows = A.audit({"sample": keys}, col)
    assert [r.problem_id for r in rows if r.verdict == "suspect"] == []  # right keys: no false alarm
    recalls = []
    for seed in range(5):
        picked = random.Random(seed).sample(sorted(keys), 5)
        changed = dict(keys)
        for pid in picked:
            old = keys[pid]
            changed[pid] = old * 1.37 + 11 if isinstance(old, float) else 1234.5
        recall, precision, flags = A.recall_precision(A.audit({"sample": changed}, col), {("sample", p) for p in picked})
        print(f"seed {seed}: recall {recall:.2f} precision {precision:.2f} flags {flags}")
        assert precision >= 0.9
        recalls.append(recall)
    assert sum(recalls) / len(recalls) >= 0.8, recalls
