"""Every sweep command the README shows runs as written after the demo (issue 41: the smoke test
and the real-model line reused the demo's sweep name and were refused as a changed
configuration). Each is read from README.md, in order, and taken as far as a sweep goes without
Ray: its config loaded and its ledger opened (where a changed configuration is refused). The
runs themselves are the demo's and the tiers' tests; ``plan_only`` lines are counted elsewhere."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

from opteval.cluster.driver.prepare import prepare
from opteval.sweepcore.config import load_config

README = Path(__file__).resolve().parents[2] / "README.md"
SWEEP = re.compile(r"(?:opteval sweep|python jobs/sweep\.py)((?: [^#`\n]*)?)")
MINE = "name: mine\nbackend: openai\nopenai:\n  base_url: http://127.0.0.1:8001/v1\n  model_id: my-model\n"


def readme_sweeps() -> list[list[str]]:
    """The argument lists of the README's sweep commands, in order (the demo first)."""
    found = []
    for line in README.read_text(encoding="utf-8").splitlines():
        if line.startswith("|") or "Exit codes" in line:
            continue
        for m in SWEEP.finditer(line):
            found.append(shlex.split(m.group(1).replace("$PWD", "/tmp/readme"), posix=True))
    return found


def test_the_readme_shows_the_commands_this_test_runs():
    runs = readme_sweeps()
    assert runs[0] == [] and len(runs) >= 6, runs  # the demo, then the others
    assert any("models=[smollm2-135m-cpu]" in a for a in runs)


def test_every_readme_sweep_opens_its_ledger_after_the_demo(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.yaml").write_text(MINE)
    opened = []
    for args in readme_sweeps():
        if "plan_only=true" in args:
            continue
        cfg = load_config([*args, f"sweep.output_dir={tmp_path / 'results'}", "tracking.enabled=false"])
        prep = prepare(cfg)  # a changed configuration under a used name raises ConfigChangedError here
        prep.ledger.close()
        opened.append(cfg.sweep.name)
    assert opened[0] == "demo" and {"smoke", "smollm2", "mine", "mine-direct", "try1", "onenode"} <= set(opened), opened
