"""The simulated policy: a deterministic, seeded stand-in for an LLM (tests, load runs, the demo).

A test double, kept outside the product: only the simulated backend (``opteval.evalcore.models.clients``'
``simulated`` client, ``sweepcore/backends/simulated.py``, ``cluster/serve/sim_serving.py``) and the
tests import it; no harness does (tests/core/test_layering.py checks). It learns which harness
and stage is calling from ``CallMeta`` alone, and reads only the prompt formats the harness
modules export as constants.

Modules: ``skill`` (``SimSkill``, ``BaselineSkill``), ``policy`` (``SimulatedModel``, the stage
registry, the study's harnesses' stages), ``baselines`` (the six baselines' stages),
``semopt`` (SemOPT's stages), ``llmopt`` (LLMOPT's protocol: five elements, Pyomo,
self-correction). Importing the package registers nothing: a stage module is imported the first
time one of its stages is asked for (``policy.STAGE_MODULES``), and reading a config imports no
module of this package (tests/core/test_layering.py checks both).
"""
from __future__ import annotations

from opteval.evalcore.sim.policy import (
    POLICIES,
    STAGE_HANDLERS,
    SimProblem,
    SimulatedModel,
    StageCall,
    content_text,
    count_tokens,
    register_stage,
    split_program,
    stage_handler,
)
from opteval.evalcore.sim.skill import BaselineSkill, SimSkill

__all__ = [
    "BaselineSkill", "POLICIES", "STAGE_HANDLERS", "SimProblem", "SimSkill", "SimulatedModel", "StageCall",
    "content_text", "count_tokens", "register_stage", "split_program", "stage_handler",
]
