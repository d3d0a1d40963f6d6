"""The one trajectory set-up every harness shares, as a template method.

``run`` checks the extraction profile, starts the Trajectory, builds the one ``Meter`` of the
trajectory (calls, transcript, the call and token budgets), times it, turns ``BudgetSpent``
into the trajectory's error and returns it. A harness implements only
``trajectory(problem, ctx, meter)`` (the trajectory is ``meter.traj``), and passes the problem
and the SAME meter to its own hooks, so work after a submission (a self-check, a variant run)
keeps counting against the budgets.
"""
from __future__ import annotations

import time

from opteval.evalcore.harnesses._common import BudgetSpent, Meter, new_trajectory
from opteval.evalcore.harnesses.base import HarnessContext
from opteval.evalcore.problems import ProblemSpec
from opteval.evalcore.records import Trajectory


class TrajectoryHarness:
    """Base of the harnesses: ``run`` is the template, ``trajectory`` the step to implement."""

    name = "harness"
    prompt_dir = "harness"
    # extraction profiles the harness supports (None: any opteval.evalcore.extraction profile)
    extractions: tuple[str, ...] | None = ("submit",)

    async def run(self, problem: ProblemSpec, ctx: HarnessContext) -> Trajectory:
        if self.extractions is not None and ctx.extraction not in self.extractions:
            allowed = " or ".join(repr(e) for e in self.extractions)
            raise ValueError(f"{self.name}: extraction profile must be {allowed}, got {ctx.extraction!r}")
        traj = new_trajectory(problem, ctx, self.name)
        meter = Meter(ctx, traj, self.name)
        t0 = time.perf_counter()
        try:
            await self.trajectory(problem, ctx, meter)
        except BudgetSpent as spent:
            traj.errors.append(f"budget spent: {spent}")
        finally:
            traj.wall_s = time.perf_counter() - t0
        return traj

    async def trajectory(self, problem: ProblemSpec, ctx: HarnessContext, meter: Meter) -> None:
        """The harness's work on ``meter.traj``: model calls through ``meter``, runs on ``ctx.executor``."""
        raise NotImplementedError
