"""A benchmark from YAML alone: configs/benchmarks/<name>.yaml with ``path:`` to a local JSONL
(rows id, question, answer) and an optional ``sha256`` is planned and swept with no code edit;
bad input is one line naming the file (and line), exit code 2, no traceback."""
from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from opteval.evalcore import problems as P
from opteval.sweepcore import config as C
from opteval.sweepcore.config import ConfigError, load_config
from tests.cli_runner import run

ROWS = [{"id": f"mine-{i}", "question": f"Maximize {i + 2} x subject to x <= {i + 1} and x >= 0.",
         "answer": (i + 2) * (i + 1)} for i in range(5)]


@pytest.fixture
def configs(tmp_path, configs_with):
    """A copy of configs/ (``tmp_path/configs``) with a folder beside it for the user's data."""
    assert configs_with() == tmp_path / "configs"
    (tmp_path / "mydata").mkdir()
    (tmp_path / "mydata" / "mine.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    yield tmp_path
    P.REGISTRY.pop("mybench", None)  # the registration is process-wide: leave the registry as found


def _yaml(root: Path, body: str) -> Path:
    path = root / "configs" / "benchmarks" / "mybench.yaml"
    path.write_text("slug: mybench\n" + body)
    return path


def _plan_only(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run("sweep", "benchmarks=[mybench]", "plan_only=true", f"sweep.output_dir={root / 'out'}",
               "methods=[direct]", *args, env={"OPTEVAL_CONFIGS": str(root / "configs")}, cwd=root, timeout=300)


def test_plan_only_counts_a_yaml_benchmark_with_a_relative_path(configs):
    _yaml(configs, "path: ../../mydata/mine.jsonl\nsamples: 3\n")
    proc = _plan_only(configs)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "planned 15 trajectories" in proc.stdout, proc.stdout  # 5 problems x 3 samples x 1 method


def test_the_problems_load_from_the_yaml_file_with_a_matching_sha256(configs):
    sha = hashlib.sha256((configs / "mydata" / "mine.jsonl").read_bytes()).hexdigest()
    _yaml(configs, f"path: {configs / 'mydata' / 'mine.jsonl'}\nsha256: {sha}\n")
    cfg = load_config(["benchmarks=[mybench]"])
    specs, key = P.load_benchmark("mybench", cfg.data.dir)
    assert [s.id for s in specs] == [r["id"] for r in ROWS]
    assert key.answers["mine-4"] == 30
    assert C.resolved(cfg)["benchmark_configs"]["mybench"]["sha256"] == sha


def test_a_sha256_mismatch_is_one_line_naming_the_file(configs):
    _yaml(configs, "path: ../../mydata/mine.jsonl\nsha256: " + "ab" * 32 + "\n")
    proc = _plan_only(configs)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    line = (proc.stdout + proc.stderr).strip().splitlines()[-1]
    assert "mine.jsonl" in line and "sha256 mismatch" in line


def test_an_unquoted_all_digit_sha256_is_named(configs):
    _yaml(configs, "path: ../../mydata/mine.jsonl\nsha256: " + "0" * 64 + "\n")  # YAML reads an integer
    with pytest.raises(ConfigError, match=r"^sha256 \[.*mybench.yaml\]: must be 64 lower-case hex digits \(quote it"):
        load_config(["benchmarks=[mybench]"])


def test_a_bad_row_names_file_and_line(configs):
    with (configs / "mydata" / "mine.jsonl").open("a") as f:
        f.write('{"id": "mine-9", "question": "q"}\n')
    _yaml(configs, "path: ../../mydata/mine.jsonl\n")
    proc = _plan_only(configs)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "mine.jsonl:6: missing field(s) answer" in proc.stdout + proc.stderr


def test_a_missing_file_and_a_missing_path_are_config_errors(configs):
    _yaml(configs, "path: nowhere.jsonl\n")
    with pytest.raises(ConfigError, match=r"^path \[.*mybench.yaml\]: no such file .*nowhere.jsonl"):
        load_config(["benchmarks=[mybench]"])
    (configs / "configs" / "benchmarks" / "mybench2.yaml").write_text("slug: mybench2\nsamples: 2\n")
    with pytest.raises(ConfigError, match=r"^path \[.*mybench2.yaml\]: missing: 'mybench2' is not a pinned"):
        load_config(["benchmarks=[mybench2]"])


def test_a_pinned_slug_cannot_be_redefined_by_a_path(configs):
    (configs / "configs" / "benchmarks" / "nl4opt.yaml").write_text("slug: nl4opt\npath: ../../mydata/mine.jsonl\n")
    with pytest.raises(ConfigError, match=r"nl4opt.yaml\]: benchmark 'nl4opt' is a pinned benchmark"):
        load_config(["benchmarks=[nl4opt]"])
    assert P.REGISTRY["nl4opt"].path is None
