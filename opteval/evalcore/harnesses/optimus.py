"""OptiMUS 0.3 (AhmadiTeshnizi et al., arXiv 2407.19633): staged extraction, per-constraint
formulation and code, template assembly, whole-program debugging.

Public workflow (teshnizi/OptiMUS ``main`` branch, ``main.py``),
with the parameter step put in front (v0.3 assumes given ``params.json``; ``get_params`` asks a
human via ``input()``, which we cannot, so low confidence is auto-accepted and no per-parameter
confidence call is made):
 0. ``parameters``: symbols, shapes, definitions and values (the values become the template's
    data, never shown in later prompts except as names, as OptiMUS keeps numbers in data.json);
 1. ``objective`` extraction; 2. ``constraints`` list; 3. ``redundancy`` review;
 4. per constraint a ``confidence`` "x OUT OF 5" call; a score <= 3 triggers a ``modify``
    keep / no / modify call (the public code's hard-coded gpt-4o; here the same model);
 5. per constraint ``formulate``: JSON with LaTeX, new variables and auxiliary constraints;
 6. per formulated constraint (auxiliaries included) a ``check`` call whose result is thrown
    away, as in the public code (its handler is a dummy lambda);
 7. ``formulate_objective``; 8. per constraint ``code`` plus ``code_objective``;
 9. template assembly (data, variables built from their shapes, snippets, solve, submit);
10. ``execute_and_debug``: up to ``MAX_DEBUG=3`` whole-program ``debug`` calls after failures.
Calls: about 6 + 4C plus debugging. Final answer: the first program that ran successfully.
The method config's ``params`` may leave out step 4 (``confidence_review: false``) and step 6
(``check: false``, whose results the public code discards anyway), as
``configs/methods/optimus.yaml`` does to match the harness paper's token accounting
(docs/calibration.md): then about 6 + 2C calls plus debugging.
Adaptations: PuLP templates instead of gurobipy (tuple-keyed dicts play
``addVars``); no RAG (off by default in the public code).
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from opteval.evalcore.harnesses._baseline import PULP_FOOTER, Baseline, feedback, json_object, params_from, python_code
from opteval.evalcore.harnesses._common import Meter
from opteval.evalcore.harnesses.base import HarnessContext
from opteval.evalcore.harnesses.registry import register_harness
from opteval.evalcore.problems import ProblemSpec
from opteval.evalcore.records import Trajectory

MAX_DEBUG = 3  # execute_code.py: max_tries=3
LOW_CONFIDENCE = 3  # main.py: a score <= 3 triggers the keep/no/modify call
_SCORE = re.compile(r"(\d)\s*OUT OF\s*5", re.I)
_IDENT = re.compile(r"^[A-Za-z_]\w*$")
_CATS = {"continuous": "Continuous", "integer": "Integer", "binary": "Binary"}



def data_lines(params: dict[str, Any]) -> list[str]:
    """``symbol = <value>`` for each parameter with a JSON value (v0.3's data.json)."""
    out = []
    for sym, spec in params.items():
        if _IDENT.match(sym) and isinstance(spec, dict) and "value" in spec:
            out.append(f"{sym} = json.loads({json.dumps(json.dumps(spec['value']))})")
    return out


def variable_lines(variables: list[dict[str, Any]]) -> list[str]:
    """Variables from their shapes: scalar, list for one dimension, tuple-keyed dict beyond
    (``generate_code.py`` builds gurobipy ``addVars`` from shapes the same way)."""
    out = []
    for v in variables:
        sym = str(v.get("symbol", ""))
        if not _IDENT.match(sym):
            continue
        cat = _CATS.get(str(v.get("type", "continuous")).lower(), "Continuous")
        shape = [str(d) for d in (v.get("shape") or [])]
        dims = [f"range({d})" if not d.startswith("range(") else d for d in shape]
        bounds = 'lowBound=0, upBound=1' if cat == "Binary" else "lowBound=0"
        if not dims:
            out.append(f'{sym} = pulp.LpVariable("{sym}", {bounds}, cat="{cat}")')
        elif len(dims) == 1:
            out.append(f'{sym} = [pulp.LpVariable(f"{sym}_{{i0}}", {bounds}, cat="{cat}") for i0 in {dims[0]}]')
        else:
            idx = [f"i{k}" for k in range(len(dims))]
            loops = " ".join(f"for {i} in {d}" for i, d in zip(idx, dims))
            name = "_".join("{" + i + "}" for i in idx)
            out.append(f'{sym} = {{({", ".join(idx)},): pulp.LpVariable(f"{sym}_{name}", {bounds}, cat="{cat}") {loops}}}')
    return out


def assemble(params: dict[str, Any], variables: list[dict[str, Any]], sense: str, snippets: list[str], objective: str) -> str:
    """The template program (``generate_code.py``): data, model, variables, snippets, solve."""
    lp_sense = "pulp.LpMaximize" if sense.lower().startswith("max") else "pulp.LpMinimize"
    parts = ["import json", "import math", "import pulp", *data_lines(params),
             f'model = pulp.LpProblem("optimus", {lp_sense})', *variable_lines(variables),
             *[s.rstrip("\n") for s in snippets], objective.rstrip("\n"), PULP_FOOTER]
    return "\n".join(parts)


@dataclass(frozen=True)
class PipelineParams:
    """Optional steps of the pipeline: the per-constraint confidence review (step 4, with its
    keep/no/modify call) and the per-constraint sanity check (step 6, result discarded)."""

    confidence_review: bool = True
    check: bool = True

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None) -> PipelineParams:
        """Validated parameters; an unknown key or a bad value is an error naming ``params.<key>``."""
        out = params_from(cls, cfg)
        for name in (f.name for f in fields(cls)):
            if not isinstance(getattr(out, name), bool):
                raise ValueError(f"params.{name} must be true or false, got {getattr(out, name)!r}")
        return out


class OptiMUS(Baseline):
    name = "optimus"
    prompt_dir = "optimus"

    @staticmethod
    def check_params(params: Mapping[str, Any] | None) -> None:
        """Raise ValueError naming the bad ``params.<key>`` (the config loader calls this)."""
        PipelineParams.from_config(params)

    async def _call_json(self, meter: Meter, ctx: HarnessContext, prompt: str, purpose: str, stage: str, **values: Any) -> Any:
        reply = await meter.call(self.messages(ctx, prompt, **values), 0, purpose, stage=stage)
        return json_object(reply.text), reply.text

    async def _run(self, problem: ProblemSpec, ctx: HarnessContext, meter: Meter, traj: Trajectory) -> None:
        steps = PipelineParams.from_config(ctx.params)
        q = problem.question
        params, _ = await self._call_json(meter, ctx, "parameters", "extract parameters", "parameters", question=q)
        params = params if isinstance(params, dict) else {}
        shown = _describe_params(params)
        objective, _ = await self._call_json(meter, ctx, "objective", "extract objective", "objective",
                                             question=q, parameters=shown)
        objective = objective if isinstance(objective, dict) else {"description": str(objective or "")}
        listed, _ = await self._call_json(meter, ctx, "constraints", "extract constraints", "constraints",
                                          question=q, parameters=shown)
        listed = [str(c) for c in listed] if isinstance(listed, list) else []
        kept, _ = await self._call_json(meter, ctx, "redundancy", "remove redundant constraints", "redundancy",
                                        question=q, constraints=json.dumps(listed, indent=1))
        constraints = [str(c) for c in kept] if isinstance(kept, list) else listed
        reviewed = []
        for c in constraints:
            if not steps.confidence_review:
                reviewed.append(c)
                continue
            reply = await meter.call(self.messages(ctx, "confidence", question=q, constraint=c), 0, "confidence",
                                     stage="confidence")
            m = _SCORE.search(reply.text)
            if m and int(m.group(1)) <= LOW_CONFIDENCE:
                verdict, _ = await self._call_json(meter, ctx, "modify", "keep/no/modify", "modify", question=q, constraint=c)
                action = verdict.get("action") if isinstance(verdict, dict) else "keep"
                if action == "no":
                    continue
                if action == "modify" and isinstance(verdict.get("constraint"), str):
                    c = verdict["constraint"]
            reviewed.append(c)
        variables: dict[str, dict[str, Any]] = {}
        formulated: list[tuple[str, str]] = []  # (description, LaTeX)
        for c in reviewed:
            form, text = await self._call_json(meter, ctx, "formulate", "formulate constraint", "formulate", question=q,
                                                parameters=shown, variables=_describe_vars(variables), constraint=c)
            form = form if isinstance(form, dict) else {"formulation": text.strip()}
            _add_variables(variables, form.get("new_variables"))
            formulated.append((c, str(form.get("formulation", ""))))
            for aux in form.get("auxiliary_constraints") or []:
                formulated.append((str(aux), str(aux)))
        for c, f in (formulated if steps.check else []):  # v0.3's "does this make sense" call; result discarded
            await meter.call(self.messages(ctx, "check", question=q, constraint=c, formulation=f), 0, "check", stage="check")
        obj_form, text = await self._call_json(meter, ctx, "formulate_objective", "formulate objective", "formulate_objective",
                                               question=q, parameters=shown, variables=_describe_vars(variables),
                                               objective=objective.get("description", ""))
        obj_form = obj_form if isinstance(obj_form, dict) else {"formulation": text.strip()}
        _add_variables(variables, obj_form.get("new_variables"))
        sense = str(obj_form.get("sense") or objective.get("sense") or "minimize")
        snippets = []
        for c, f in formulated:
            reply = await meter.call(self.messages(ctx, "code", question=q, parameters=shown, variables=_describe_vars(variables),
                                                   constraint=c, formulation=f), 0, "code constraint", stage="code")
            snippets.append(python_code(reply.text) or "")
        reply = await meter.call(self.messages(ctx, "code_objective", question=q, parameters=shown,
                                               variables=_describe_vars(variables),
                                               objective=str(obj_form.get("formulation", ""))), 0, "code objective",
                                 stage="code_objective")
        program = assemble(params, list(variables.values()), sense, snippets, python_code(reply.text) or "")
        max_debug = max(0, min(MAX_DEBUG, ctx.budgets.max_turns - 1))
        for attempt in range(max_debug + 1):
            result = await self.execute(ctx, traj, attempt + 1, program)
            if result.outcome == "ok" and result.submission is not None:
                self.answer(traj, result)  # the first program that ran successfully
                return
            if attempt == max_debug:
                break
            reply = await meter.call(self.messages(ctx, "debug", attempt=attempt + 1, max_attempts=max_debug,
                                                   question=q, code=program,
                                                   error=feedback(result, ctx.budgets.summary_chars)),
                                     attempt + 1, "debug", stage="debug")
            program = python_code(reply.text) or program
        traj.errors.append(f"no program ran successfully after {max_debug} debug calls")


def _add_variables(variables: dict[str, dict[str, Any]], new: Any) -> None:
    for v in new if isinstance(new, list) else []:
        if isinstance(v, dict) and _IDENT.match(str(v.get("symbol", ""))):
            variables.setdefault(str(v["symbol"]), v)


def _describe_params(params: dict[str, Any]) -> str:
    """Names, shapes and definitions only: the numbers stay in the data (as in OptiMUS)."""
    lines = [f"- {s}: shape {spec.get('shape', [])}; {spec.get('definition', '')}" for s, spec in params.items()
             if isinstance(spec, dict)]
    return "\n".join(lines) or "(none)"


def _describe_vars(variables: dict[str, dict[str, Any]]) -> str:
    lines = [f"- {s}: shape {v.get('shape', [])}, {v.get('type', 'continuous')}; {v.get('definition', '')}"
             for s, v in variables.items()]
    return "\n".join(lines) or "(none yet)"


HARNESS = register_harness(OptiMUS(), group="baselines")
