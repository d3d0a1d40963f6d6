"""The prompt formats the simulated policy reads are constants the harness modules export; each
is checked here against what the harness really writes (its rendered prompt file or its own
formatting code), so rewording a prompt fails this test instead of silently changing the
simulated results (opteval.evalcore.sim imports these constants; it has no regex of its own)."""
from __future__ import annotations

from opteval.evalcore.harnesses import _common, autoformulation, opticycle, reflexion, semopt
from opteval.evalcore.harnesses._common import load_prompt, render


def test_problem_tag_reads_the_question_back():
    text = render(load_prompt("direct", "user"), question="Maximize x.\nSubject to x <= 2.")
    m = _common.PROBLEM_TAG.search(text)
    assert m and m.group(1) == "Maximize x.\nSubject to x <= 2."


def test_turn_line_reads_the_progress_section():
    text = render(load_prompt("_shared", "progress"), turn=3, max_turns=12, calls_used=4, max_calls=16,
                  summary_actions=6, summary="(none)")
    m = _common.TURN_LINE.search(text)
    assert m and m.groups() == ("3", "12")


def test_action_head_reads_the_rolling_summary():
    actions = [opticycle.Action(1, "Build the model.", "ok", "done"), opticycle.Action(2, "Solve it.", "error", "boom")]
    found = opticycle.ACTION_HEAD.findall(opticycle.render_summary(actions, 6, 2000))
    assert found == [("1", "1", "ok", "Build the model."), ("2", "2", "error", "Solve it.")]


def test_trial_line_reads_both_reflexion_prompts():
    for name, extra in (("user", {}), ("retry", {"code": "x", "errors": "e", "reflections": "r"})):
        text = render(load_prompt("reflexion", name), trial=2, max_trials=3, question="q", **extra)
        m = reflexion.TRIAL_LINE.search(text)
        assert m and m.groups() == ("2", "3"), name


def test_candidate_line_and_blocks_read_autoformulation():
    head = render(load_prompt("autoformulation", "_expand_head"), question="q", partial="p", k=5, n=8)
    m = autoformulation.CANDIDATE_LINE.search(head)
    assert m and m.groups() == ("5", "8")
    listing = autoformulation._listing(["x = 1\n", "y = 2\n"])
    assert autoformulation.CANDIDATE_BLOCK.findall(listing) == [("1", "x = 1\n"), ("2", "y = 2\n")]


def test_semopt_heads_and_alternatives():
    code = load_prompt("semopt", "code")
    assert semopt.HEAD_STRATEGY + "\n" in code and semopt.HEAD_MODEL + "\n" in code
    assert semopt.HEAD_STRATEGY + "\n" in load_prompt("semopt", "model")
    listed = "\n\n".join(semopt.ALTERNATIVE_HEAD.format(i) + "\nbody" for i in (1, 2, 3))
    assert len(semopt.ALTERNATIVE.findall(listed)) == 3


def test_the_simulator_uses_the_exported_constants():
    from opteval.evalcore.sim import baselines, policy
    from opteval.evalcore.sim import semopt as sim_semopt

    assert policy.PROBLEM_TAG is _common.PROBLEM_TAG and policy.TURN_LINE is _common.TURN_LINE
    assert policy.ACTION_HEAD is opticycle.ACTION_HEAD
    assert baselines.TRIAL_LINE is reflexion.TRIAL_LINE and baselines.CANDIDATE_LINE is autoformulation.CANDIDATE_LINE
    assert sim_semopt.ALTERNATIVE is semopt.ALTERNATIVE and sim_semopt.HEAD_MODEL == semopt.HEAD_MODEL
