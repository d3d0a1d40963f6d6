"""Rewards as the released training code computes them (the paper-text variants stay in
``opteval.evalcore.rewards`` as ``sirl``/``sirl-stage1``/``orr1``).

Each scheme is named for its source and comes with the extraction profile that builds the
program the way that source's trainer does (footer included), so the scheme reads exactly the
lines its source reads:

``sirl-released`` (extraction ``sirl-train``)
    Cardinal-Operations/SIRL@8caaad14 ``SIRLTrain/reward_func/batch_score_gurobi.py``
    (``compute_score``), with ``content_utils.py`` and ``executor.py`` of the same commit:
    reward = 0.5 x format + 1 x answer + 1 x code, where

    * format (:func:`sirl_format`): ``2 - minus`` with minus 1/8 per ``<think>``,
      ``</think>``, ``<model``, ``</model>`` tag (1/4 per ``<python>``, ``</python>``) whose
      count is not exactly 1, and 1/3 for each of three order tests; so the term is 0..1.0;
    * code: the program ran without an exception within 5 s AND printed something (SIRL's
      ``PythonExecutor.execute`` re-runs a silent program with ``exec(list)``, a TypeError);
    * answer (:func:`sirl_answer`): |y* - y| / (|y*| + 1) < 1e-6 on the number of the
      ``Just print the best obj:`` line (first ``-?\\d+\\.?\\d*`` on it, so ``1e+20`` reads 1);
      a ground truth of 0 or a submitted 0 never passes (``if ans and solver_result``);
      no ground truth (a status answer here) passes when no objective was printed and the
      code term holds. No stage-2 bonus in the released batch scorer.
``orr1-released`` (extraction ``orr1-train``)
    SCUTE-ZZ/OR-R1@baea665 ``02_grpo_train_8b.py`` (``reward_with_reference``):
    reward = format + valid code + voting, where

    * format: the share of the six headings found (substring test), as ``orr1``;
    * valid code: the program (first ```` ```python ```` block + OR-R1's coptpy footer,
      which needs a global ``model`` and the name ``COPT``) exited 0 within 10 s and printed
      ``Just print the best solution:`` or ``No Best Solution``;
    * voting: over consecutive chunks of 8 completions (OR-R1's ``num_generations``; here
      chunks of 8 within each ``id`` group, in input order), answers other than None and
      ``No Best Solution`` vote with ``int(float(x))``; the first key (in arrival order)
      with the most votes wins only if it has at least 2; a completion gets 1 when its
      ``int(float(y))`` equals the winner. The answer is not used.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from opteval.evalcore.extraction import ExtractionProfile, sirl_block
from opteval.evalcore.grading import parse_submission
from opteval.evalcore.reward_registry import Reward, _Run, register_scheme
from opteval.evalcore.sandbox.types import OK, ExecResult

SIRL_COMMIT = "Cardinal-Operations/SIRL@8caaad14 SIRLTrain/reward_func/batch_score_gurobi.py"
ORR1_COMMIT = "SCUTE-ZZ/OR-R1@baea665 02_grpo_train_8b.py"

# Which extraction profile builds a released scheme's programs; jobs/rewards.py defaults to it.
SCHEME_EXTRACTION = {"sirl-released": "sirl-train", "orr1-released": "orr1-train"}


def extraction_for(scheme: str, requested: str | None) -> str:
    """The extraction profile to run ``scheme``'s programs with: a released scheme's own profile
    (another one is an error: the scheme reads the lines its footer prints), else
    ``requested`` or ``submit``."""
    own = SCHEME_EXTRACTION.get(scheme)
    if own is None:
        return requested or "submit"
    if requested not in (None, own):
        raise ValueError(f"--extraction {requested}: scheme {scheme!r} runs programs as its source "
                         f"builds them (extraction {own!r})")
    return own


# -- SIRL (training reward) --------------------------------------------------------------------

SIRL_FORMAT_WEIGHT = 0.5
SIRL_ANSWER_WEIGHT = 1.0
SIRL_CODE_WEIGHT = 1.0
SIRL_CRITERION = 1e-6
SIRL_TIMEOUT_S = 5.0  # PythonExecutor(timeout_length=5)
SIRL_OBJ = "Just print the best obj:"
_SIRL_MODEL = re.compile(r"^(\s*)(\w+)\.(optimize|solve)\(\)", re.M)
_SIRL_NUMBER = re.compile(r"-?\d+\.?\d*")
_SIRL_FORBIDDEN = (re.compile(r"(\s|^)?input\("), re.compile(r"(\s|^)?os.system\("))


def _sirl_insert_print(code: str) -> str:
    """``content_utils.insert_print(code, "gurobi")``: after each ``<model>.optimize()`` line
    (the model named by the first ``.optimize()``/``.solve()`` line) print the objective and
    the solution; a ``.solve()`` model gets nothing."""
    m = _SIRL_MODEL.search(code)
    if not m:
        return code
    indent, name = m.group(1), m.group(2)
    pattern = r"^(\s*)(" + name + r"\.optimize\(\))"
    status_check = (
        f"{indent}if {name}.status == GRB.OPTIMAL:\n"
        f"{indent}    print(f'Just print the best obj: {{{name}.ObjVal}}')\n"
        f"{indent}    print('Just print the best sol:[', end = '')\n"
        f"{indent}    for var in {name}.getVars():\n"
        f"{indent}        print(f'{{var.X}}', end = ',')\n"
        f"{indent}    print(']')\n"
        f"{indent}else:\n"
        f"{indent}    print('No optimal solution found, status:', {name}.status)"
    )
    return re.sub(pattern, rf"\1\2\n{status_check}", code, flags=re.M)


def sirl_program(text: str) -> str | None:
    """``content_utils.extract_code_block(text, "gurobi")``, then the executor's refusal of
    ``input(``/``os.system(`` (a RuntimeError, so no code credit) as a program that raises."""
    block = sirl_block(text)
    code = None if block is None else _sirl_insert_print(block)
    if code is not None and any(p.search(code) for p in _SIRL_FORBIDDEN):
        return 'raise RuntimeError("Input or system commands are not allowed")\n'
    return code


def sirl_done(result: ExecResult | None) -> bool:
    """SIRL's ``code_excu_result == 'Done'``: no exception, within 5 s, something printed."""
    return (result is not None and result.outcome == OK and result.wall_s <= SIRL_TIMEOUT_S
            and (result.stdout or "") != "")


def sirl_obj(result: ExecResult | None) -> float | None:
    """``content_utils.extract_obj`` on the stripped stdout of a 'Done' run (else None)."""
    if not sirl_done(result):
        return None
    assert result is not None
    log = (result.stdout or "").strip()
    if SIRL_OBJ not in log:
        return None
    line = next(ln for ln in log.split("\n") if SIRL_OBJ in ln)
    found = _SIRL_NUMBER.findall(line)
    return float(found[0]) if found else None


def sirl_format(processed_str: str) -> float:
    """``format_reward``: 2 - penalties (0..2; the scheme weighs it by 0.5)."""
    minus_score = 0.0
    tags = {"think_start": "<think>", "think_end": "</think>", "model_start": "<model",
            "model_end": "</model>", "python_start": "<python>", "python_end": "</python>"}
    position = {}
    for tag_name, tag_str in tags.items():
        count = processed_str.count(tag_str)
        position[tag_name] = processed_str.find(tag_str)
        if count != 1:
            minus_score += 1 / 4 if "python" in tag_name else 1 / 8
    order_set = list(position.values())
    if order_set[1] > min(order_set[2:5]):
        minus_score += 1 / 3
    if any(order_set[i] > order_set[i + 1] for i in range(0, 6, 2)):
        minus_score += 1 / 3
    if order_set[4] <= max(order_set[:4]):
        minus_score += 1 / 3
    return 2 - minus_score


def sirl_answer(solver_result: float | None, ans: float | None, done: bool, cri: float = SIRL_CRITERION) -> bool:
    """``answer_reward`` verbatim, truthiness included (a 0 is falsy: never within cri)."""
    abs_err = abs(ans) if ans else 1.0
    if ans is None and solver_result is None and done:
        abs_err = 0.0
    if ans and solver_result:
        abs_err = abs(ans - solver_result) / (abs(ans) + 1)
    return abs_err < cri


def _sirl_ground_truth(answer: Any) -> float | None:
    parsed = parse_submission(answer)
    return parsed if isinstance(parsed, float) else None  # a status: SIRL's None (no objective)


@register_scheme("sirl-released", needs_answer=True,
                 description="SIRL's released batch scorer: 0.5 x graded format (0..2) + answer 1 at rel 1e-6 + code 1")
def sirl_released(runs: Sequence[_Run], grading: str) -> list[Reward]:
    out = []
    for run in runs:
        done = sirl_done(run.result)
        parts = {
            "format": SIRL_FORMAT_WEIGHT * sirl_format(run.item.completion or ""),
            "answer": SIRL_ANSWER_WEIGHT * float(sirl_answer(sirl_obj(run.result), _sirl_ground_truth(run.item.answer),
                                                             done)),
            "code": SIRL_CODE_WEIGHT * float(done),
        }
        out.append(Reward(sum(parts.values()), run.correct, parts))
    return out


def _sirl_submission(result: ExecResult) -> Any:
    return sirl_obj(result)


# -- OR-R1 (training reward) -------------------------------------------------------------------

ORR1_ADD_SCRIPT = ('\nif model.status == COPT.OPTIMAL:\n    print(f"Just print the best solution: {model.objval}")\n'
                   'else:\n    print("No Best Solution")')
ORR1_BEST = "Just print the best solution:"
ORR1_NONE = "No Best Solution"
ORR1_TIMEOUT_S = 10.0  # compile_script(timeout=10)
ORR1_GROUP = 8  # range(0, len(completions), 8)
ORR1_HEADINGS = ("## Mathematical Model:", "## Decision Variables:", "## Objective Function:", "## Constraints:",
                 "## Python Code Solution Using `coptpy`:", "```python")


def orr1_program(output: str) -> str | None:
    """``run_code``: from the first ```` ```python ```` to the next fence (an unclosed block:
    the slice to -1), plus OR-R1's footer; None without a ```` ```python ````."""
    output = output or ""
    start = output.find("```python")
    if start == -1:
        return None
    end = output.find("```", start + 9)
    return output[start:end].replace("```python", "") + ORR1_ADD_SCRIPT


def orr1_best_solution(result: ExecResult | None) -> str | None:
    """``compile_script``'s ``execution_best_solution``: the text after the first best-solution
    line's label, else ``No Best Solution`` when stdout says so; None when the program failed
    (non-zero exit, over 10 s) or printed neither."""
    if result is None or result.outcome != OK or result.wall_s > ORR1_TIMEOUT_S:
        return None
    out = result.stdout or ""
    pos = out.find(ORR1_BEST)
    if pos != -1:
        best = out[pos:].replace(ORR1_BEST, "").strip()
        nl = best.find("\n")
        return best[:nl] if nl != -1 else best
    return ORR1_NONE if ORR1_NONE in out else None


def _as_int(x: str | None) -> int | None:
    if x is None or x == ORR1_NONE:
        return None
    try:
        return int(float(x))
    except (ValueError, OverflowError):  # OR-R1 skips ValueError; inf (OverflowError) would crash it
        return None


def orr1_vote(answers: Sequence[str | None]) -> int | None:
    """The voting answer of one chunk: the first int(float(x)) with the most votes, if >= 2."""
    counts: dict[int, int] = {}
    for a in answers:
        key = _as_int(a)
        if key is not None:
            counts[key] = counts.get(key, 0) + 1
    voting, max_count = None, 1
    for key, count in counts.items():
        if count > max_count:
            voting, max_count = key, count
    return voting


def _orr1_chunk(runs: Sequence[_Run]) -> list[Reward]:
    answers = [orr1_best_solution(r.result) for r in runs]
    voting = orr1_vote(answers)
    out = []
    for run, ans in zip(runs, answers):
        text = run.item.completion or ""
        y = _as_int(ans)
        parts = {
            "format": sum(1 for h in ORR1_HEADINGS if h in text) / len(ORR1_HEADINGS),
            "code": 1.0 if ans is not None else 0.0,
            "voting": 1.0 if y is not None and voting is not None and y == voting else 0.0,
        }
        out.append(Reward(sum(parts.values()), run.correct, parts))
    return out


@register_scheme("orr1-released", needs_answer=False,
                 description="OR-R1's released reward: format/6 + footer printed + int(float) vote (>= 2) per 8")
def orr1_released(runs: Sequence[_Run], grading: str) -> list[Reward]:
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(runs):
        groups.setdefault(r.item.id, []).append(i)
    out: list[Reward | None] = [None] * len(runs)
    for idx in groups.values():
        for start in range(0, len(idx), ORR1_GROUP):
            chunk = idx[start:start + ORR1_GROUP]
            for i, reward in zip(chunk, _orr1_chunk([runs[i] for i in chunk])):
                out[i] = reward
    return [r for r in out if r is not None]


def _orr1_submission(result: ExecResult) -> Any:
    best = orr1_best_solution(result)
    if best is None:
        return None
    if best == ORR1_NONE:
        return "infeasible"
    try:
        return float(best)
    except ValueError:
        return best or None


# extraction profiles, registered lazily by name in opteval.evalcore.extraction (resolved on first use)
SIRL_TRAIN_PROFILE = ExtractionProfile(
    "sirl-train", sirl_program, _sirl_submission,
    "SIRL training: <python> tag or first ```python block + best obj/sol print; the printed best obj")
ORR1_TRAIN_PROFILE = ExtractionProfile(
    "orr1-train", orr1_program, _orr1_submission,
    "OR-R1 training: first ```python block + OR-R1's coptpy footer; the printed best solution")
