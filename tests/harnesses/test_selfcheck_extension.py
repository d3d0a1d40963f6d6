"""Adding a harness takes one module, its prompts and one method YAML: the self-check harness
(tests/harnesses/selfcheck.py, selfcheck_prompts/, selfcheck.yaml) is registered through the one
way in (``register_harness``, reached by ``harness: <module>:<name>`` in the YAML), run end to
end in process with a scripted model and the real local sandbox, and its post-submission call
is metered by the trajectory's own meter (the token budget keeps counting)."""
from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from opteval.evalcore.harnesses import HARNESSES, HarnessContext, get_harness
from opteval.evalcore.harnesses.version import harness_version
from opteval.evalcore.problems import ProblemSpec
from opteval.sweepcore import config as C
from opteval.sweepcore.config import load_config
from tests.harnesses.scripted import ScriptedModel, program

HERE = Path(__file__).parent
PROBLEM = ProblemSpec("sample", "p-1", "Maximize 3x with x <= 4 and x >= 0. Report the optimal objective.")


@pytest.fixture
def selfcheck_method():
    """The harness's one method YAML, given by its path (nothing in the repository edited)."""
    sys.modules.pop("tests.harnesses.selfcheck", None)  # registered by the lookup below, not by us
    return load_config([f"methods=[{HERE / 'selfcheck.yaml'}]"])


def _run(cfg, model, executor):
    method = C.method_config("selfcheck")
    ctx = HarnessContext(model=model, executor=executor, sampling=C.effective_sampling(cfg, "sim-small"), sample=0,
                         budgets=C.effective_budgets(cfg, "selfcheck"), model_name=model.name, method="selfcheck",
                         extraction=method.extraction)
    return asyncio.run(get_harness(method.harness).run(PROBLEM, ctx))


def test_the_method_yaml_alone_registers_the_harness(selfcheck_method):
    harness = get_harness(C.method_config("selfcheck").harness)
    assert harness.name == "selfcheck" and HARNESSES["selfcheck"] is harness
    version = harness_version("tests.harnesses.selfcheck:selfcheck")
    assert set(version) == {"prompts", "code"}  # its own module and prompt folder are fingerprinted


def test_selfcheck_runs_end_to_end_and_its_check_is_metered(selfcheck_method, local_executor):
    model = ScriptedModel({"act": program(12.0), "check": "DISAGREE: x is integer"})
    traj = _run(selfcheck_method, model, local_executor)
    assert traj.submission is not None and traj.submission.raw == 12.0
    assert [c.stage for c in traj.calls] == ["act", "check"]
    assert traj.prompt_tokens == 20 and traj.completion_tokens == 10  # both calls on one trajectory
    harness, stage, messages = model.calls[1]
    assert (harness, stage) == ("selfcheck", "check")
    assert PROBLEM.question in messages[1]["content"] and "12.0" in messages[1]["content"]
    assert traj.errors == ["self-check disagrees: DISAGREE: x is integer"]
    assert len(traj.transcript) == 2


def test_the_token_budget_counts_the_selfcheck_call(selfcheck_method, local_executor):
    # 15 tokens per scripted call: the program's call spends the whole budget, so the check is
    # refused (a second meter would have started at 0 and let it through)
    from dataclasses import replace

    cfg = replace(selfcheck_method, budgets=replace(selfcheck_method.budgets, max_total_tokens=15))
    model = ScriptedModel({"act": program(12.0), "check": "CONFIRMED"})
    traj = _run(cfg, model, local_executor)
    assert [c.stage for c in traj.calls] == ["act"]
    assert traj.errors == ["budget spent: tokens"]
    assert traj.submission is not None and traj.submission.raw == 12.0
