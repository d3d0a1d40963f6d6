"""The public author API: what a harness, grading or extraction profile, reward scheme, benchmark
or simulated-policy stage author imports, in the checkout or from an installed plugin.

Why a module of its own: authors used to import private modules (``opteval.evalcore.harnesses._common``)
that the project reshapes freely. The names below are the stable surface (Ray's ``PublicAPI``
habit): they keep their meaning across releases, and a change to one is announced. Everything
else in ``opteval.evalcore`` is internal.

A plugin is an installed package with an entry point in the group ``opteval`` naming a module
(imported) or a function (called) that registers its parts through these functions::

    [project.entry-points.opteval]
    mine = "my_package.opteval_plugin:register"

``register_method_file`` and ``register_benchmark_file`` make a method or benchmark YAML shipped
in the package usable by name (``methods=[mine]``); a YAML anywhere is also accepted by path
(``methods=[path/to/mine.yaml]``). docs/extending.md walks through one.
"""
from __future__ import annotations

from pathlib import Path

from opteval.evalcore.extraction import ExtractionProfile, extract_code, extract_submission
from opteval.evalcore.extraction import register_profile as register_extraction_profile
from opteval.evalcore.grading import GradingProfile, grade
from opteval.evalcore.grading import register_profile as register_grading_profile
from opteval.evalcore.harnesses._common import (
    Meter,
    exec_record,
    fenced_blocks,
    load_prompt,
    observation,
    render,
    system_prompt,
)
from opteval.evalcore.harnesses.base import Budgets, Executor, Harness, HarnessContext, SessionHandle
from opteval.evalcore.harnesses.registry import get_harness, register_harness
from opteval.evalcore.harnesses.template import TrajectoryHarness
from opteval.evalcore.models.base import CallMeta, Completion, Message, Sampling
from opteval.evalcore.problems import ProblemSpec
from opteval.evalcore.records import STATUS_SUBMITTED, Submission, Trajectory
from opteval.evalcore.registry import ENTRY_POINT_GROUP, Registry, RegistryError, UnknownNameError, register_config_file
from opteval.evalcore.reward_registry import Reward, register_scheme
from opteval.evalcore.sandbox.types import ExecResult, Limits


def register_method_file(path: str | Path, name: str | None = None) -> str:
    """A method YAML (harness, extraction, budgets) usable as ``methods=[name]``; returns the name."""
    return register_config_file("methods", path, name)


def register_benchmark_file(path: str | Path, name: str | None = None) -> str:
    """A benchmark YAML (``slug``, ``path:`` to a JSONL of id, question, answer relative to the
    YAML, optional ``sha256``, ``samples``, ``grading``) usable as ``benchmarks=[slug]``."""
    return register_config_file("benchmarks", path, name)


def register_stage(harness: str, stage: str, handler: object) -> None:
    """Teach the simulated policy (a test double) one (harness, stage) of a plugin's harness:
    ``handler(model, call) -> completion text``. Imports the simulator, so call it only from a
    plugin's entry point, never from a harness module."""
    from opteval.evalcore.sim.policy import register_stage as _register  # the test double, only when asked

    _register(harness, stage, handler)  # type: ignore[arg-type]


__all__ = [
    "ENTRY_POINT_GROUP", "Budgets", "CallMeta", "Completion", "ExecResult", "Executor", "ExtractionProfile",
    "GradingProfile", "Harness", "HarnessContext", "Limits", "Message", "Meter", "ProblemSpec", "Registry",
    "RegistryError", "Reward", "STATUS_SUBMITTED", "Sampling", "SessionHandle", "Submission", "Trajectory",
    "TrajectoryHarness", "UnknownNameError", "exec_record", "extract_code", "extract_submission", "fenced_blocks",
    "get_harness", "grade", "load_prompt", "observation", "register_benchmark_file", "register_extraction_profile",
    "register_grading_profile", "register_harness", "register_method_file", "register_scheme", "register_stage",
    "render", "system_prompt",
]
