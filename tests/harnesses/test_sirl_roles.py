"""ISC over ten roles (evalcore/harnesses/sirl_roles.py, a labelled option): sample s of a problem
answers under role s mod 10 before SIRL's own system prompt; isc_select then votes over the roles.
SIRL's paper (arXiv 2505.11792, 3.1) describes ten roles; Cardinal-Operations/SIRL does not publish
them, so the roles are ours (prompts/sirl_roles/roles.md)."""
from __future__ import annotations

from typing import Any, cast

from opteval.evalcore.grading import grade
from opteval.evalcore.harnesses import HARNESSES, HarnessContext
from opteval.evalcore.harnesses._common import load_prompt
from opteval.evalcore.harnesses.sirl import SIRL
from opteval.evalcore.harnesses.sirl_roles import SIRLRoles, roles
from opteval.evalcore.models.base import Sampling
from opteval.evalcore.selection import isc_select
from opteval.evalcore.sim import SimulatedModel


def test_ten_distinct_roles_before_sirls_own_system_prompt(sample):
    problems, _ = sample
    assert "sirl_roles" in HARNESSES
    rs = roles()
    assert len(rs) == 10 and len(set(rs)) == 10
    sirl_system = load_prompt("sirl", "system").strip()
    harness, sirl = SIRLRoles(), SIRL()
    seen = []
    for s in range(12):
        ctx = HarnessContext(model=SimulatedModel(), executor=cast(Any, None), sampling=Sampling(), sample=s,
                             extraction="sirl")
        system, user = harness._messages(problems["sample-0001"], ctx)
        assert system["content"] == rs[s % 10] + "\n\n" + sirl_system
        assert user == sirl._messages(problems["sample-0001"], ctx)[1]
        seen.append(system["content"])
    assert len(set(seen)) == 10 and seen[10] == seen[0]


def test_isc_votes_over_the_ten_roles(sample, run_many):
    problems, key = sample
    pid = "sample-0003"
    trajs = run_many([("sirl_roles", problems[pid], SimulatedModel(), s) for s in range(10)])
    systems = {t.transcript[0]["messages"][0]["content"].split("\n", 1)[0] for t in trajs}
    assert systems == set(roles())  # each role answered once
    subs = [t.submission.raw if t.submission else None for t in trajs]
    models = [(t.execs[0].models or [None])[-1] if t.execs else None for t in trajs]
    chosen, scores = isc_select(subs, models, "optagentbench")
    assert len(scores) == 10 and max(scores) > 0
    assert grade(chosen, key[pid])  # most roles got it right, so ISC picks the right answer
