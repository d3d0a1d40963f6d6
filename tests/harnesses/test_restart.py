"""A killed cell restarts the interpreter: real harness, real sandbox, a scripted model."""
from __future__ import annotations

import pytest

from opteval.evalcore.harnesses import Budgets
from opteval.evalcore.harnesses.opticycle import RESTARTED
from opteval.evalcore.models.base import Completion, Usage
from opteval.evalcore.sandbox.types import Limits

LIMITS = Limits(wall_s=1.5, cpu_s=1.5)
SLOW = "import time\nstate = 41\nwhile True:\n    pass\n"
PROBE = "try:\n    state\n    print('STATE SURVIVED')\nexcept NameError:\n    print('fresh interpreter')\nstate = 41\n"
FORMULATION = (
    '```formulation\n{"sets": [], "parameters": {}, "variables": [{"name": "x"}], '
    '"objective": {"sense": "max"}, "constraints": ["x <= 42"]}\n```\n'
)


class Scripted:
    """Replies with the scripted cells in order and keeps every prompt it was sent."""

    name = "scripted"

    def __init__(self, cells: list[str], formulation: bool = False) -> None:
        self.cells = list(cells)
        self.formulation = formulation
        self.prompts: list[str] = []

    async def chat(self, messages, sampling, seed, meta=None):
        self.prompts.append(messages[-1]["content"])
        if meta is not None and meta.stage == "formulate":
            text = "Purpose: formulation\n\n" + FORMULATION
        else:
            cell = self.cells.pop(0) if self.cells else "print('nothing left')\n"
            text = f"Purpose: step {len(self.prompts)}\n\n```python\n{cell}```\n"
        return Completion(text, Usage(len(messages[-1]["content"]) // 4, len(text) // 4), "stop", 0.0)


@pytest.mark.parametrize("method", ["opticycle", "optistate"])
def test_a_killed_first_cell_restarts_and_the_trajectory_recovers_and_submits(sample, run_harness, executor, method):
    problems, _ = sample
    model = Scripted([SLOW, PROBE, "submit(state + 1)\n"])
    t = run_harness(method, problems["sample-0001"], model, budgets=Budgets(exec_limits=LIMITS))
    assert [e.outcome for e in t.execs] == ["killed", "ok", "ok"]
    assert [e.turn for e in t.execs] == [1, 3, 4]  # turn 2 was the restart
    assert "fresh interpreter" in t.execs[1].stdout_tail and "STATE SURVIVED" not in t.execs[1].stdout_tail
    assert t.status == "submitted" and t.submission.raw == 42
    assert executor.restarted == 1 and executor.opened == executor.closed == 1
    # the model was told plainly: killed, why, and that the state is gone
    after = model.prompts[-2]  # the prompt that produced the probe cell
    assert f"(turn 2): {RESTARTED}" in after
    assert "wall time limit of 1.5s exceeded" in after and "ALL state from earlier cells is lost" in after
    assert any("interpreter restarted" in e for e in t.errors)


def test_the_restart_costs_a_turn(sample, run_harness, executor):
    problems, _ = sample
    t = run_harness("opticycle", problems["sample-0001"], Scripted([SLOW, "submit(1)\n"]),
                    budgets=Budgets(max_turns=2, exec_limits=LIMITS))
    assert [e.outcome for e in t.execs] == ["killed"]
    assert executor.restarted == 1 and t.status != "submitted"
    assert t.errors[-1] == "budget spent: turns (2)"
    # with no turn left after the kill, nothing is restarted
    t1 = run_harness("opticycle", problems["sample-0001"], Scripted([SLOW]), budgets=Budgets(max_turns=1, exec_limits=LIMITS))
    assert [e.outcome for e in t1.execs] == ["killed"] and executor.restarted == 1


def test_a_crashed_interpreter_is_restarted_too(sample, run_harness, executor):
    problems, _ = sample
    model = Scripted(["x = 1\n", "import os\nos._exit(3)\n", "print(x)\n", "x = 2\nsubmit(x)\n"])
    t = run_harness("opticycle", problems["sample-0001"], model, budgets=Budgets(exec_limits=LIMITS))
    assert [e.outcome for e in t.execs] == ["ok", "killed", "error", "ok"]
    assert "NameError" in t.execs[2].stderr_tail  # x from turn 1 did not survive the restart
    assert "exited with status 3" in model.prompts[2] and t.submission.raw == 2


def test_the_simulated_policy_rebuilds_after_a_restart(sample, run_harness):
    """The policy must not reuse objects built before a restart (it sends the build cell again)."""
    from opteval.evalcore.models.base import CallMeta
    from opteval.evalcore.sim.policy import PURPOSE_BUILD, SimulatedModel

    problems, _ = sample
    spec = problems["sample-0001"]
    summary = (
        f"### Action 1 (turn 1): ok\nPurpose: {PURPOSE_BUILD}\nOutput:\n```text\n(no output)\n```\n\n"
        f"### Action 2 (turn 2): killed\nPurpose: Solve the model and submit the objective.\nOutput:\n```text\nx\n```\n\n"
        f"### Action 3 (turn 3): {RESTARTED}\nPurpose: Restart\nOutput:\n```text\nlost\n```"
    )
    user = f"<problem>\n{spec.question}\n</problem>\nTurn 4 of 12\n{summary}"
    text = SimulatedModel(policy="always_correct").respond([{"role": "user", "content": user}], 1,
                                                          CallMeta("opticycle", "act"))
    assert PURPOSE_BUILD in text.splitlines()[0]
