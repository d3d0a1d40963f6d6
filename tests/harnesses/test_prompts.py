"""Prompt files: composed from shared fragments; OptiState's instructions = OptiCycle's + its section."""
from __future__ import annotations

import re

import pytest

from opteval.evalcore.harnesses import Budgets, HarnessContext
from opteval.evalcore.harnesses._common import PROMPTS_DIR, _expand, load_prompt, prompt_files, render, system_prompt
from opteval.evalcore.models.base import Sampling
from opteval.evalcore.sim.policy import SimulatedModel
from opteval.evalcore.solvers import PAPER_SOLVERS, prompt_list, validate


class _NoExecutor:
    """Composing a prompt runs nothing."""

    async def run(self, code, limits=None):
        raise AssertionError("a prompt test ran a program")

    async def open_session(self):
        raise AssertionError("a prompt test opened a session")


def _ctx(solvers=PAPER_SOLVERS) -> HarnessContext:
    return HarnessContext(model=SimulatedModel(), executor=_NoExecutor(), sampling=Sampling(), sample=0,
                          budgets=Budgets(), solvers=tuple(solvers))


def test_optistate_system_prompt_is_opticycles_plus_its_formulation_section():
    cycle = system_prompt("opticycle", "system", _ctx())
    state = system_prompt("optistate", "system", _ctx())
    section = load_prompt("optistate", "formulation")
    assert state == cycle.rstrip("\n") + "\n\n" + section
    # OptiCycle's guidance that OptiState must carry too (it once lacked it): present in both
    for phrase in ("## Modeling checklist", "non-negativity is rarely stated but usually meant",
                   "Build incrementally", "Submitting ends the task", "A solver status that is not optimal",
                   "it is restarted for you, which costs a turn"):
        assert phrase in cycle and phrase in state, phrase


def test_user_prompts_share_the_problem_and_progress_fragments():
    problem = load_prompt("_shared", "problem").rstrip("\n")
    progress = load_prompt("_shared", "progress").rstrip("\n")
    for method, name in (("opticycle", "user"), ("optistate", "user")):
        text = load_prompt(method, name)
        assert text.startswith(problem) and progress in text
    assert load_prompt("optistate", "formulate").startswith(problem)
    assert load_prompt("direct", "user").startswith(problem)


def test_every_prompt_file_expands_and_has_no_dangling_include():
    for path in PROMPTS_DIR.rglob("*.md"):
        ref = f"{path.parent.name}/{path.stem}"
        text, used = _expand(ref, ())
        assert "{{>" not in text, ref
        assert used[0] == path


def test_prompt_files_list_the_fragments_a_method_reads():
    names = {str(p.relative_to(PROMPTS_DIR)) for p in prompt_files("optistate")}
    assert {"optistate/system.md", "opticycle/system.md", "optistate/formulation.md",
            "_shared/modeling_checklist.md", "_shared/problem.md", "_shared/progress.md"} <= names
    assert not any(n.startswith("direct/") for n in names)


def test_an_include_cycle_and_a_missing_fragment_are_named(tmp_path, monkeypatch):
    import opteval.evalcore.harnesses._common as common

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.md").write_text("{{> a/y}}\n")
    (tmp_path / "a" / "y.md").write_text("{{> a/x}}\n")
    (tmp_path / "a" / "z.md").write_text("{{> a/nope}}\n")
    monkeypatch.setattr(common, "PROMPTS_DIR", tmp_path)
    with pytest.raises(ValueError, match=r"a/x -> a/y -> a/x"):
        _expand("a/x", ())
    with pytest.raises(FileNotFoundError, match=r"nope\.md \(included from a/z\)"):
        _expand("a/z", ())


@pytest.mark.parametrize("method,name", [("direct", "system"), ("direct", "system_stdout"),
                                         ("opticycle", "system"), ("optistate", "system")])
def test_prompts_offer_exactly_the_configured_solvers(method, name):
    default = system_prompt(method, name, _ctx())
    assert prompt_list(PAPER_SOLVERS) in default
    for absent in ("highspy", "coptpy", "gurobipy", "when installed"):
        assert absent not in default
    wider = system_prompt(method, name, _ctx(("scipy", "pulp", "pyscipopt", "highspy")))
    assert "highspy (HiGHS)" in wider


def test_solver_setting_is_validated():
    assert validate(None) == ("scipy", "pulp", "pyscipopt")
    with pytest.raises(ValueError, match="unknown.*cplex"):
        validate(["scipy", "cplex"])
    with pytest.raises(ValueError, match="list of names"):
        validate("scipy")


def test_placeholders_are_all_filled_by_the_harnesses():
    """Every {{name}} left after includes is one the harnesses pass (render raises otherwise)."""
    passed = {"question", "turn", "max_turns", "calls_used", "max_calls", "summary_actions", "summary",
              "formulation", "formulation_status", "solvers", "why"}
    # the six baselines' placeholders (their scripted tests render each prompt through the real harness)
    passed |= set("a attempt b candidates code comment comments conditions constraint constraints diagnosis error "
                  "errors expert experts feedback k level max_attempts max_trials model n objective parameters "
                  "partial reflections trial variables observation siblings strategy".split())
    # sirl_roles; LLMOPT's F2C, self_correction and id_gt (tests/harnesses/test_llmopt.py renders each)
    passed |= {"five", "output", "role"}
    for path in PROMPTS_DIR.rglob("*.md"):
        text = load_prompt(path.parent.name, path.stem)
        names = set(re.findall(r"\{\{(\w+)\}\}", text))
        assert names <= passed, (path, names - passed)
        render(text, **dict.fromkeys(passed, "x"))


def test_the_fork_server_preimports_the_configured_solver_set():
    from opteval.evalcore.sandbox import ForkServer
    from opteval.evalcore.solvers import preimport_modules, versions

    server = ForkServer(modules=preimport_modules(["pulp"]))
    try:
        server.start()
        assert server.modules == ["pulp"]  # numpy/scipy/pyscipopt not imported ahead of the first run
    finally:
        server.close()
    assert set(versions(None)) == {"scipy", "pulp", "pyscipopt"} and all(versions(None).values())
