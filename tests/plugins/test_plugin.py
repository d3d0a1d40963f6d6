"""An installed package adds a harness, a grading profile and a benchmark (and, for the simulated
policy, its harness's stage) through the ``opteval`` entry point, and a sweep runs them with no
file of the checkout touched: the plugin lives in a temporary folder, installed into a temporary
virtual environment that borrows this one's packages."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pyarrow.dataset as ds
import pytest

REPO = Path(__file__).resolve().parents[2]

PLUGIN = '''
"""A tiny opteval plugin: everything through opteval.harness, nothing from the checkout."""
import re
from pathlib import Path

from opteval import harness as api

HERE = Path(__file__).parent


class Echo(api.TrajectoryHarness):
    """One call, one program, its submit() value: Direct's shape, written from the public API."""
    name = "plugin_echo"
    prompt_dir = "plugin_echo"

    async def trajectory(self, problem, ctx, meter):
        messages = [{"role": "user", "content": "Solve and call submit():\\n" + problem.question}]
        completion = await meter.call(messages, 0, "generate")
        code = api.extract_code(completion.text, ctx.extraction)
        if code is None:
            meter.traj.errors.append("no program")
            return
        result = await ctx.executor.run(code, ctx.budgets.exec_limits)
        raw = api.extract_submission(result, ctx.extraction)
        meter.traj.execs.append(api.exec_record(0, result, raw, code=code))
        if raw is not None:
            meter.traj.submission = api.Submission(raw, ctx.extraction)
            meter.traj.status = api.STATUS_SUBMITTED


def _stage(model, call):
    text = " ".join(str(m.get("content", "")) for m in call.messages)
    number = re.findall(r"-?\\d+(?:\\.\\d+)?", text)[-1]
    return f"```python\\nsubmit({number})\\n```\\n"


def register():
    api.register_harness(Echo())
    api.register_grading_profile(api.GradingProfile("plugin_exact", "a == b", lambda a, b: a == b))
    api.register_method_file(HERE / "plugin_echo.yaml")
    api.register_benchmark_file(HERE / "tinybench.yaml")
    api.register_stage("plugin_echo", "act", _stage)
'''

METHOD = "name: plugin_echo\nharness: plugin_echo\nextraction: submit\nbudgets:\n  max_calls: 1\n  max_turns: 1\n"
BENCH = "slug: tinybench\npath: tiny.jsonl\nsamples: 1\ngrading: plugin_exact\n"
ROWS = [{"id": "t1", "question": "Maximise x subject to x <= 42.", "answer": 42},
        {"id": "t2", "question": "Minimise y subject to y >= 7.", "answer": 7},
        {"id": "t3", "question": "Minimise z subject to z >= 3.5.", "answer": 4}]


def _write_plugin(root: Path) -> Path:
    pkg = root / "src" / "opteval_demo_plugin"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(PLUGIN)
    (pkg / "plugin_echo.yaml").write_text(METHOD)
    (pkg / "tinybench.yaml").write_text(BENCH)
    (pkg / "tiny.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    (root / "pyproject.toml").write_text(textwrap.dedent('''
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "opteval-demo-plugin"
        version = "0.0.1"
        [project.entry-points.opteval]
        demo = "opteval_demo_plugin:register"
        [tool.setuptools.package-data]
        opteval_demo_plugin = ["*.yaml", "*.jsonl"]
    '''))
    return root


@pytest.mark.integration
def test_a_plugin_harness_profile_and_benchmark_sweep_without_touching_the_checkout(tmp_path):
    before = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True).stdout
    plugin = _write_plugin(tmp_path / "plugin")
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                              str(plugin)], capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-2000:]

    out = tmp_path / "results"
    sweep = subprocess.run(
        [str(python), str(REPO / "jobs" / "sweep.py"), "models=[sim-small]", "methods=[plugin_echo]",
         "benchmarks=[tinybench]", "sweep.name=plugin", f"sweep.output_dir={out}", "tracking.enabled=false"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert sweep.returncode == 0, sweep.stdout[-3000:] + sweep.stderr[-3000:]

    rows = ds.dataset(str(out / "plugin" / "trajectories"), format="parquet").to_table(
        columns=["method", "benchmark", "problem_id", "correct"]).to_pylist()
    assert {(r["method"], r["benchmark"]) for r in rows} == {("plugin_echo", "tinybench")}
    # the plugin's stage submits the question's last number; its grading profile is exact equality
    assert {r["problem_id"]: r["correct"] for r in rows} == {"t1": True, "t2": True, "t3": False}
    after = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True).stdout
    assert after == before


def test_an_unknown_name_suggests_the_close_ones():
    from opteval.evalcore.registry import Registry, UnknownNameError

    reg: Registry[int] = Registry("widget")
    reg.add("opticycle", 1)
    reg.add_lazy("optistate", "json:loads")
    with pytest.raises(UnknownNameError, match=r"unknown widget 'optcycle'; did you mean 'opticycle'"):
        reg["optcycle"]
    assert "optistate" in reg and "optistate" not in reg.loaded()  # listed without importing
    assert reg["optistate"] is json.loads and sys.modules["json"]
