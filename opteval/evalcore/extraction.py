"""How a completion becomes a program and the program's run becomes a submission.

Each way is a named profile so published results can be reproduced exactly:

``submit`` (ours)
    Code: the LAST closed fenced block tagged ``python``/``py``/``python3`` or untagged.
    Submission: what the program passed to ``submit(...)`` (``ExecResult.submission``),
    whatever the outcome (a program may submit, then crash: the value stands).
``orlm``
    As ORLM's ``eval/execute.py`` (Cardinal-Operations/ORLM) does it: the text from the
    FIRST ``` ```python ``` up to the next ``` ``` ``` (only the ``python`` tag counts,
    an unclosed block runs to the end of the completion less its last character,
    as ORLM's slice does), plus a footer that prints
    ``Just print the best solution: <objval>`` when the coptpy model's status is
    optimal and ``No Best Solution`` otherwise. ORLM's footer assumes a global named
    ``model`` and the name ``COPT``; ours finds the model (the global ``model`` if it
    is a coptpy Model, else the last coptpy Model among the globals, else the last one
    alive anywhere, found through ``gc``) and imports ``COPT`` itself. With no coptpy
    model the footer prints nothing, so there is no submission (ORLM: a NameError).
    Submission: parsed from the first ``Just print the best solution:`` line of stdout
    (a float when it parses, else the raw text), else ``"infeasible"`` when stdout says
    ``No Best Solution`` (ORLM's word for any non-optimal status; its answer files use
    it for infeasible problems), else None. Like ORLM, only a clean exit counts.
``sirl``
    As SIRL's evaluation (Cardinal-Operations/SIRL ``utils.py``/``check_result.py``) does it.
    Code: the body of the first ``<python>...</python>`` (the first ```` ```python ```` block
    inside it when it has one), else the first ```` ```python ```` block; after the first line
    ``<name>.optimize()`` a Gurobi status check is inserted (``<name>.solve()``: the COPT one)
    that prints ``Just print the best solution: <objval>`` when optimal. Submission: the first
    number on the first such stdout line, else ``"infeasible"`` when stdout says
    ``nfeasible`` (SIRL's test), else None; only a clean exit counts. SIRL's grading forgives
    variable types (:func:`sirl_flip_variable_types`, used by the ``sirl`` harness).
``stdout``
    For programs written without ``submit``. Code: as ``submit``. Submission: the last
    objective statement in stdout, whatever the outcome: a line with an objective
    label (``OBJECTIVE_LABEL`` below: objective / obj value / optimal value / total
    <word> / minimum|maximum|min|max <word> / best solution / optimal cost|profit...)
    followed by a number (``NUMBER``; thousands commas and a leading ``$`` allowed),
    e.g. ``Optimal objective value: 123.4``, ``Total cost = 5``, ``Objective: -3e2``;
    or a line saying ``infeasible`` / ``unbounded`` (a line saying both is ambiguous and
    skipped). The first number after the label on that line is taken.
``llmopt``
    As LLMOPT's inference (quao627/LLMOPT@3cb8710e ``inference/inference_q2f2c.py``,
    ``infer_code``) reads a completion: the escapes it undoes (``\\n``, ``&#39;``, ``&lt;``,
    ``&gt;``, ``\\"``), then the text between the FIRST ```` ```python ```` and the next
    ```` ``` ```` (no such block: no program; LLMOPT's ``split`` would raise), then its two
    ``print("\\<newline>`` repairs. Submission: LLMOPT's harness asks the model to read the
    optimum off the program's output (LLMOPT's ``id_gt`` prompt, ``evalcore/harnesses/llmopt.py``);
    where no model is at hand (scoring a file offline) this profile reads stdout as ``stdout`` does.
"""
from __future__ import annotations

import importlib.util
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opteval.evalcore.registry import Registry, UnknownNameError
from opteval.evalcore.sandbox.types import OK, ExecResult

ORLM_BEST = "Just print the best solution:"
ORLM_NONE = "No Best Solution"

# Fenced block: an opening fence line (optional language tag), the body, a closing fence line.
_FENCE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)^[ \t]*```", re.M | re.S)
_PYTHON_TAGS = {"", "python", "py", "python3", "py3"}

OBJECTIVE_LABEL = (
    r"\b(?:objective(?:\s+function)?(?:\s+value)?|obj(?:ective)?[\s_]*val(?:ue)?|"
    r"optimal\s+(?:objective\s+)?(?:value|cost|profit|revenue|solution)|"
    r"total\s+(?!time|elapsed|running|iteration|node|number|count)[a-z]+|"
    r"(?:minimum|maximum|minimal|maximal|min|max)\s+[a-z]+|best\s+solution)\b"
)
# A number with at least one digit; thousands commas allowed ("1,234.5").
NUMBER = r"[-+]?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
# label, then at most 60 characters without a digit or "[" (so "Objective range [2e+00, ..."
# from a solver log does not count), then the number: the first number after the label.
_OBJECTIVE_LINE = re.compile(OBJECTIVE_LABEL + r"[^\d\n\[]{0,60}?(?P<num>" + NUMBER + r")", re.I)
_STATUS_WORD = re.compile(r"\b(infeasible|unbounded)\b", re.I)


# the one error class of every registry (opteval.evalcore.registry), under the name callers know
UnknownProfileError = UnknownNameError


@dataclass(frozen=True)
class ExtractionProfile:
    name: str
    extract_code: Callable[[str], str | None]
    extract_submission: Callable[[ExecResult], Any]
    description: str
    # (package, the opteval extra that installs it) the profile cannot work without: without
    # them every completion would score 0 with exit 0, so the jobs refuse to start instead
    needs: tuple[tuple[str, str], ...] = ()


# -- code --------------------------------------------------------------------------------


def fenced_python_blocks(text: str) -> list[str]:
    """Bodies of the closed fenced blocks tagged python (or untagged), in order, dedented."""
    blocks = []
    for match in _FENCE.finditer(text or ""):
        if match.group(1).lower() in _PYTHON_TAGS:
            body = textwrap.dedent(match.group(2))
            if body.strip():
                blocks.append(body)
    return blocks


def _last_block(text: str) -> str | None:
    blocks = fenced_python_blocks(text)
    return blocks[-1] if blocks else None


def _orlm_code(text: str) -> str | None:
    # Mirrors ORLM's slicing on purpose (including its quirks) so published numbers reproduce.
    start = (text or "").find("```python")
    if start == -1:
        return None
    end = text.find("```", start + 9)
    script = text[start:end].replace("```python", "")  # end == -1: ORLM's slice drops the last char
    if script.strip() == "":
        return None
    return script + ORLM_FOOTER


ORLM_FOOTER = '''

def __opteval_orlm_footer():
    import gc as _gc
    try:
        import coptpy as _cp
        from coptpy import COPT as _COPT
    except ImportError:
        print("orlm footer: coptpy is not importable", file=__import__("sys").stderr)
        return
    _g = globals()
    _m = _g.get("model")
    if not isinstance(_m, _cp.Model):
        _found = [v for v in list(_g.values()) if isinstance(v, _cp.Model)]
        if not _found:
            _found = [o for o in _gc.get_objects() if isinstance(o, _cp.Model)]
        _m = _found[-1] if _found else None
    if _m is None:
        print("orlm footer: no coptpy Model found", file=__import__("sys").stderr)
        return
    if _m.status == _COPT.OPTIMAL:
        print(f"Just print the best solution: {_m.objval}")
    else:
        print("No Best Solution")


__opteval_orlm_footer()
'''


_SIRL_TAG = re.compile(r"<python>(.*?)</python>", re.S)
_SIRL_FENCE = re.compile(r"```python(.*?)```", re.S)
_SIRL_SOLVE = re.compile(r"^(\s*)(\w+)\.(optimize|solve)\(\)", re.M)


def sirl_block(text: str) -> str | None:
    """SIRL's code block: the ``<python>`` tag's content (a ```python fence inside it unwrapped),
    else the first ```python fence; stripped, possibly empty; None when there is neither. The
    evaluation profile here and the released trainer's (opteval.evalcore.rewards_released) both read it."""
    text = text or ""
    tag = _SIRL_TAG.search(text)
    if tag:
        code = tag.group(1).strip()
        if "```" in code:
            inner = _SIRL_FENCE.search(code)
            if inner:
                code = inner.group(1).strip()
        return code
    fence = _SIRL_FENCE.search(text)
    return fence.group(1).strip() if fence else None


def _sirl_code(text: str) -> str | None:
    code = sirl_block(text)
    if not code:
        return None
    return _sirl_insert_print(code)


def _sirl_insert_print(code: str) -> str:
    m = _SIRL_SOLVE.search(code)
    if not m:
        return code
    indent, name, verb = m.group(1), m.group(2), m.group(3)
    if verb == "optimize":  # gurobipy (SIRL's insert_print)
        check = (f"{indent}if {name}.status == GRB.OPTIMAL:\n"
                 f"{indent}    print(f'Just print the best solution: {{{name}.ObjVal}}')\n"
                 f"{indent}else:\n{indent}    print('No optimal solution found, status:', {name}.status)")
    else:  # coptpy
        check = (f"{indent}if {name}.status == COPT.OPTIMAL:\n"
                 f"{indent}    print(f'Just print the best solution: {{{name}.objval}}')\n"
                 f"{indent}else:\n{indent}    print('No optimal solution found, status:', {name}.status)")
    line = re.compile(r"^(\s*)(" + re.escape(name) + r"\." + verb + r"\(\))", re.M)
    return line.sub(lambda mm: mm.group(1) + mm.group(2) + "\n" + check, code)


_SIRL_ADDVAR = re.compile(r"(\w+\s*=\s*\w+\.addVar[s]?)\(([\s\S]*?)(\)\n)", re.M)


def sirl_flip_variable_types(completion_text: str) -> str | None:
    """SIRL's ``change_variable_types`` on a whole completion: with ``vtype`` present, every
    ``INTEGER`` becomes ``CONTINUOUS`` (else every ``CONTINUOUS`` becomes ``INTEGER``); without
    one, ``vtype=GRB.INTEGER`` is added to each ``x = m.addVar(s)(...)`` call. None when SIRL's
    rule leaves nothing to flip (``vtype`` present with neither word)."""
    text = completion_text or ""
    if "Vtype" in text or "vtype" in text:
        if "INTEGER" in text:
            return text.replace("INTEGER", "CONTINUOUS")
        if "CONTINUOUS" in text:
            return text.replace("CONTINUOUS", "INTEGER")
        return None

    def add(m: re.Match) -> str:
        params = m.group(2).rstrip()
        if re.search(r"\bvtype\s*=", params):
            return m.group(0)
        new = (params + ("" if params.endswith(",") else ",") + " vtype=GRB.INTEGER") if params else "vtype=GRB.INTEGER"
        return f"{m.group(1)}({new}{m.group(3)}"

    return _SIRL_ADDVAR.sub(add, text)


_SIRL_NUMBER = re.compile(r"-?\d+\.?\d*")


def _sirl_submission(result: ExecResult) -> Any:
    if result.outcome != OK:
        return None
    out = result.stdout or ""
    for line in out.split("\n"):
        if ORLM_BEST in line:
            nums = _SIRL_NUMBER.findall(line)
            return float(nums[0]) if nums else None
    if "nfeasible" in out:
        return "infeasible"
    return None


# -- submissions -------------------------------------------------------------------------


def _submit_submission(result: ExecResult) -> Any:
    return result.submission


def _orlm_submission(result: ExecResult) -> Any:
    if result.outcome != OK:
        return None
    out = result.stdout or ""
    pos = out.find(ORLM_BEST)
    if pos != -1:
        value = out[pos + len(ORLM_BEST):].strip().split("\n", 1)[0].strip()
        try:
            return float(value)
        except ValueError:
            return value or None
    if ORLM_NONE in out:
        return "infeasible"
    return None


def _stdout_submission(result: ExecResult) -> Any:
    found: Any = None
    for line in (result.stdout or "").splitlines():
        statuses = {m.lower() for m in _STATUS_WORD.findall(line)}
        if len(statuses) == 1:
            found = statuses.pop()
            continue
        if statuses:  # "infeasible or unbounded": ambiguous, keep what we had
            continue
        value = _objective_number(line)
        if value is not None:
            found = value
    return found


def _objective_number(line: str) -> float | None:
    for match in _OBJECTIVE_LINE.finditer(line):
        text = match.group("num").replace(",", "")
        try:
            return float(text)
        except ValueError:
            continue
    return None


def llmopt_code(text: str) -> str | None:
    """LLMOPT's ``infer_code`` slicing, character for character (see the module docstring)."""
    ans = (text or "").replace("\\\\n", "\n").replace("&#39;", "'").replace("&lt;", "<").replace("&gt;", ">") \
        .replace('\\\\\"', '"')
    if "```python" not in ans:
        return None
    code = ans.split("```python")[1].split("```")[0].replace('print("\\\\\n', 'print("') \
        .replace('print(f"\\\\\n', 'print(f"')
    return code if code.strip() else None


PROFILES: Registry[ExtractionProfile] = Registry("extraction profile")
for _p in (
    ExtractionProfile("submit", _last_block, _submit_submission,
                      "last fenced python block; the value passed to submit()"),
    ExtractionProfile("orlm", _orlm_code, _orlm_submission,
                      "ORLM eval: first ```python block + coptpy footer; the printed best solution",
                      needs=(("coptpy", "solvers"),)),
    ExtractionProfile("sirl", _sirl_code, _sirl_submission,
                      "SIRL eval: <python> tag or first ```python block + status print; the printed best solution"),
    ExtractionProfile("stdout", _last_block, _stdout_submission,
                      "last fenced python block; the last objective value printed"),
    ExtractionProfile("llmopt", llmopt_code, _stdout_submission,
                      "LLMOPT inference: first ```python block after its unescaping; the optimum "
                      "read off stdout (the llmopt harness asks the model, LLMOPT's id_gt prompt)"),
):
    PROFILES.add(_p.name, _p)
# the released reward schemes' extraction profiles (opteval.evalcore.rewards_released), known by name
# before that module is imported (the report and the rewards job list them)
PROFILES.add_lazy("sirl-train", "opteval.evalcore.rewards_released:SIRL_TRAIN_PROFILE")
PROFILES.add_lazy("orr1-train", "opteval.evalcore.rewards_released:ORR1_TRAIN_PROFILE")


def missing_packages(profile: str) -> str | None:
    """Why ``profile`` cannot work in this environment (a package it needs is not importable,
    named with the extra that installs it), else None."""
    entry = PROFILES.get(profile)
    for package, extra in (entry.needs if entry else ()):
        if importlib.util.find_spec(package) is None:
            return (f"--extraction {profile} needs the {package} package, which is not installed: "
                    f"pip install 'opteval[{extra}]' (or pip install {package})")
    return None


def register_profile(profile: ExtractionProfile) -> ExtractionProfile:
    """The one way in for an extraction profile: ``register_profile(ExtractionProfile(name,
    extract_code, extract_submission, description))`` (from a plugin's entry point, or the module
    that defines it); then a method YAML's ``extraction:`` and the rewards job accept its name. A
    taken name is an error."""
    return PROFILES.add(profile.name, profile)


def get_profile(profile: str) -> ExtractionProfile:
    return PROFILES[profile]


def extract_code(completion_text: str, profile: str) -> str | None:
    """The program to execute (ORLM footer included), or None when there is no code."""
    return get_profile(profile).extract_code(completion_text)


def extract_submission(result: ExecResult, profile: str) -> Any:
    """The raw submission the profile reads from one run, or None."""
    return get_profile(profile).extract_submission(result)


def explain_no_submission(result: ExecResult, profile: str) -> str:
    """Why a run gave no submission under ``profile``, in one line (for details files and
    reports): the program's own error when it failed, else what the profile looked for."""
    get_profile(profile)
    err = [ln.strip() for ln in (result.stderr or "").splitlines() if ln.strip()]
    last_err = err[-1][:300] if err else ""
    if result.outcome != OK:
        return f"the program ended with outcome {result.outcome}" + (f": {last_err}" if last_err else "")
    if profile == "orlm":
        footer = next((ln for ln in err if ln.startswith("orlm footer:")), "")
        if footer:
            return (f"{footer}: the orlm profile reads the objective of a coptpy Model (ORLM's footer); "
                    "programs using PuLP, Pyomo, SciPy... need --extraction stdout or submit")
        return f"stdout has neither {ORLM_BEST!r} nor {ORLM_NONE!r}"
    if profile == "stdout":
        return ("no objective line in stdout (a label such as 'Optimal objective value:' followed by a number, "
                "or a line saying infeasible/unbounded)")
    return "the program never called submit(...)"
