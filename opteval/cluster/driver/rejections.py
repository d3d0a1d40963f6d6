"""Rejections during the sweep: a 400 that every call of a model gets is a configuration error.

Why: a server that refuses every request the same way (``max_tokens`` above its context, a field
it does not accept) made each trajectory an empty reply graded wrong: 0% with 0 errors. The
guard watches each model's calls as trajectories come back; after ``sweep.reject_streak``
consecutive calls refused with the same HTTP 400 text it trips, the model's dispatch stops and
the sweep exits 2 naming the model and the server's text. An isolated 400 (one conversation
outgrew the context) resets nothing but the streak and stays that call's failure. No Ray import.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from opteval.evalcore.finish_reasons import rejection
from opteval.evalcore.records import Trajectory


@dataclass
class _Streak:
    text: str | None = None
    count: int = 0


@dataclass
class RejectionGuard:
    """Consecutive same-text HTTP 400 rejections per model; ``tripped[model]`` is the one line."""

    streak: int = 8
    tripped: dict[str, str] = field(default_factory=dict)
    _runs: dict[str, _Streak] = field(default_factory=dict)

    def observe(self, model: str, traj: Trajectory | None) -> None:
        """Count the trajectory's calls in order (an answered call ends the streak)."""
        if traj is None or model in self.tripped:
            return
        run = self._runs.setdefault(model, _Streak())
        for call in traj.calls:
            got = rejection(call.finish_reason)
            if got is None or got[0] != 400:
                run.text, run.count = None, 0
                continue
            run.count = run.count + 1 if got[1] == run.text else 1
            run.text = got[1]
            if run.count >= self.streak:
                self.tripped[model] = (
                    f"model {model!r}: the server refused {run.count} calls in a row with HTTP 400: {run.text} "
                    f"(a configuration error, not the model's answers: fix the request or the server; "
                    f"sweep.reject_streak={self.streak})")
                return

    def should_stop(self, model: str) -> bool:
        return model in self.tripped
