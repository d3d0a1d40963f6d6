"""A sweep as inspect_ai eval logs, written through inspect_ai's own API (its maintainers'
advice: the file format is not a frozen spec), so ``inspect view`` opens an opteval sweep.

One log per (model, method, benchmark); every planned trajectory is a sample (id = problem
id, epoch = sample + 1): its transcript as messages, its programs and their outputs in
metadata (``programs``), the grade as score ``correct`` (``C``/``I``, explained by the
grading profile), its token usage, and a missing trajectory as the sample's error (scored
``I``: it stays in the denominator). inspect_ai is the optional extra ``opteval[inspect]``."""
from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from opteval.evalcore.exports.cells import Cell, Group

# inspect_ai (the optional extra) is imported inside the functions, never when this module loads:
# `opteval export lm-eval` and the rest of opteval run without it.

SCORER = "correct"


def _messages(cell: Cell) -> list[Any]:
    # deferred: optional extra opteval[inspect]
    from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageTool, ChatMessageUser

    kinds = {"system": ChatMessageSystem, "user": ChatMessageUser, "assistant": ChatMessageAssistant,
             "tool": ChatMessageTool}
    return [kinds.get(m["role"], ChatMessageUser)(content=m["content"]) for m in cell.conversation()]


def _usage(row: Mapping[str, Any] | None) -> Any:
    # deferred: optional extra opteval[inspect]
    from inspect_ai.model import ModelUsage

    if row is None:
        return None
    inp, out = row.get("prompt_tokens"), row.get("completion_tokens")
    if inp is None and out is None:
        return None
    inp, out = int(inp or 0), int(out or 0)
    cached = row.get("cached_prompt_tokens")
    return ModelUsage(input_tokens=inp, output_tokens=out, total_tokens=inp + out,
                      input_tokens_cache_read=None if cached is None else int(cached))


def _programs(cell: Cell) -> list[dict[str, Any]]:
    keep = ("turn", "outcome", "code", "stdout_tail", "stderr_tail", "submission", "exit_code", "wall_s")
    return [{k: e.get(k) for k in keep} for e in cell.execs()]


def sample(cell: Cell, model: str) -> Any:
    """One inspect_ai ``EvalSample`` for a planned trajectory."""
    # deferred: optional extra opteval[inspect]
    from inspect_ai.log import EvalError, EvalSample
    from inspect_ai.scorer import Score

    row = cell.row
    messages = _messages(cell)
    profile = (row or {}).get("grading_profile") or "unknown"
    verdict = "correct" if cell.correct else ("missing (counted wrong)" if cell.missing else "wrong")
    score = Score(value="C" if cell.correct else "I",
                  answer=None if row is None or row.get("submission") is None else str(row["submission"]),
                  explanation=f"{verdict} under grading profile {profile}",
                  metadata={"grading_profile": profile, "status": (row or {}).get("status", "not run")})
    usage = _usage(row)
    return EvalSample(
        id=cell.problem_id, epoch=cell.sample + 1, input=cell.prompt(), target="", messages=messages,
        scores={SCORER: score}, model_usage={model: usage} if usage is not None else {},
        metadata={"opteval_key": cell.key, "programs": _programs(cell),
                  "n_calls": (row or {}).get("n_calls"), "simulated": bool((row or {}).get("simulated"))},
        error=EvalError(message=cell.why_missing, traceback="", traceback_ansi="") if cell.missing else None,
    )


def eval_log(group: Group, cells: list[Cell], sweep: str, created: str | None = None) -> Any:
    """The ``EvalLog`` of one (model, method, benchmark)."""
    # deferred: optional extra opteval[inspect]
    from inspect_ai.log import EvalConfig, EvalDataset, EvalLog, EvalMetric, EvalResults, EvalScore, EvalSpec, EvalStats
    from inspect_ai.model import ModelUsage

    model, method, benchmark = group
    samples = [sample(c, model) for c in cells]
    n = len(cells)
    correct = sum(c.correct for c in cells)
    total = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    for s in samples:
        for u in s.model_usage.values():
            total = {k: total[k] + getattr(u, k) for k in total}
    created = created or _dt.datetime.now(_dt.UTC).isoformat()
    return EvalLog(
        status="success",
        eval=EvalSpec(created=created, task=f"opteval/{method}/{benchmark}", model=model,
                      dataset=EvalDataset(name=benchmark, samples=len({c.problem_id for c in cells})),
                      config=EvalConfig(epochs=max((c.sample for c in cells), default=0) + 1),
                      metadata={"sweep": sweep, "method": method, "benchmark": benchmark}),
        results=EvalResults(total_samples=n, completed_samples=sum(not c.missing for c in cells),
                            scores=[EvalScore(name=SCORER, scorer=SCORER, metrics={
                                "accuracy": EvalMetric(name="accuracy", value=correct / n if n else 0.0)})]),
        stats=EvalStats(started_at=created, completed_at=created, model_usage={model: ModelUsage(**total)}),
        samples=samples,
    )


def log_name(group: Group) -> str:
    """A file name per group that no model, method or benchmark name can break out of."""
    return "_".join(re.sub(r"[^A-Za-z0-9.-]+", "-", part) for part in group) + ".eval"


def write_logs(groups: Mapping[Group, list[Cell]], sweep: str, out: Path) -> list[Path]:
    """Write one log per group into ``out`` with ``inspect_ai.log.write_eval_log``; the paths."""
    from inspect_ai.log import write_eval_log  # the optional extra opteval[inspect]: loaded only when exporting

    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for group, cells in groups.items():
        path = out / log_name(group)
        write_eval_log(eval_log(group, cells, sweep), str(path))
        paths.append(path)
    return paths
