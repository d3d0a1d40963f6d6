"""A run without a submission says why (the program's error, or what the profile looked for)."""
from __future__ import annotations

from opteval.evalcore.extraction import explain_no_submission, extract_code, extract_submission
from opteval.evalcore.sandbox import run_program

PULP_PRINTS = ("```python\nimport pulp\np = pulp.LpProblem('t', pulp.LpMaximize)\nx = pulp.LpVariable('x', 0, 4)\n"
               "p += x\np.solve(pulp.PULP_CBC_CMD(msg=0))\nprint('Objective:', pulp.value(p.objective))\n```")


def test_orlm_on_pulp_code_names_the_missing_coptpy_model():
    r = run_program(extract_code(PULP_PRINTS, "orlm") or "")
    assert extract_submission(r, "orlm") is None
    why = explain_no_submission(r, "orlm")
    assert "coptpy" in why and "--extraction stdout" in why


def test_submit_and_failed_programs_say_why():
    r = run_program(extract_code(PULP_PRINTS, "submit") or "")
    assert extract_submission(r, "submit") is None and extract_submission(r, "stdout") == 4.0
    assert explain_no_submission(r, "submit") == "the program never called submit(...)"
    bad = run_program("raise ValueError('no data for x')")
    assert "ValueError: no data for x" in explain_no_submission(bad, "stdout")
