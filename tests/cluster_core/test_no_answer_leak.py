"""House rule: answers live only with the driver. What the driver ships to a worker for a
trajectory (a TrajectoryTask, pickled as Ray would) must carry no answer."""
from __future__ import annotations

import dataclasses

import cloudpickle

from opteval.cluster.driver.dispatch import Dispatcher
from opteval.cluster.driver.prepare import prepare
from opteval.cluster.serve.serving import Endpoint
from opteval.evalcore.problems import ProblemSpec
from opteval.sweepcore.config import load_config


def _answer_forms(answer) -> set[str]:
    if isinstance(answer, str):
        return set()  # status words appear in every system prompt by design
    forms = {repr(answer), f"{answer:g}", f"{answer:.2f}", f"{answer:.6g}"}
    if float(answer).is_integer():
        forms.add(str(int(answer)))
    return {f for f in forms if len(f.replace(".", "").lstrip("-0")) >= 3}


def _leaves(obj):
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield from _leaves(getattr(obj, f.name))
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaves(k)
            yield from _leaves(v)
    elif isinstance(obj, (list, tuple, set)):
        for v in obj:
            yield from _leaves(v)
    else:
        yield obj


def test_trajectory_tasks_carry_no_answer(tmp_path):
    cfg = load_config(["methods=[direct,opticycle]", "benchmarks=[sample]", "samples.default=1",
                       f"sweep.output_dir={tmp_path}", "sweep.name=leak", "tracking.enabled=false"])
    prep = prepare(cfg, read_only=True)
    answers = prep.answers["sample"]
    dispatcher = Dispatcher.__new__(Dispatcher)  # only _task is exercised: no actors needed
    dispatcher.prep = prep
    ep = Endpoint(name="sim-small", base_url="http://127.0.0.1:1/sim-small/v1", model_id="sim-small")
    checked = 0
    for item in prep.plan:
        task = dispatcher._task(item, ep)
        assert type(task.problem) is ProblemSpec
        assert {f.name for f in dataclasses.fields(task.problem)} == {"benchmark", "id", "question"}
        blob = cloudpickle.dumps(task)
        assert b"AnswerKey" not in blob
        # Every leaf a worker receives, except the question itself and the typed sampling and
        # budget parameters (fixed config numbers that may coincide with an answer).
        shipped = [ProblemSpec(task.problem.benchmark, task.problem.id, ""),
                   *(getattr(task, f.name) for f in dataclasses.fields(task) if f.name not in {"problem", "sampling", "budgets"})]
        answer = answers[item.problem_id]
        for leaf in _leaves(shipped):
            if isinstance(leaf, str):
                # the key's last part is a sha256 digest of names and the config (never the answer):
                # its hex digits can spell an answer by chance ('fd4d7be26931' holds 6931)
                text = leaf.rsplit("/", 1)[0] if leaf == item.key else leaf
                for form in _answer_forms(answer):
                    assert form not in text, f"{item.key}: answer {form!r} in a string sent to a worker"
            elif isinstance(leaf, (int, float)) and not isinstance(leaf, bool) and not isinstance(answer, str):
                assert leaf != answer, f"{item.key}: the answer {answer!r} is a value sent to a worker"
        checked += 1
    assert checked == len(prep.plan) >= 90
