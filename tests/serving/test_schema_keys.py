"""Every config key the serving code reads exists in the typed schema (a key read but not
declared would be unsettable: OmegaConf refuses unknown keys), and every vllm key a model
YAML may use is declared."""
from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

from opteval.sweepcore.config import ServingSection, VllmSection
from opteval.sweepcore.placement import _VLLM_KEYS

ROOT = Path(__file__).resolve().parents[2]
FILES = ["cluster/serve/llm_serving.py", "cluster/serve/serving.py", "cluster/serve/sim_serving.py",
         "cluster/serve/serve_apps.py", "cluster/serve/deployers.py", "cluster/serve/fleet.py",
         "sweepcore/endpoint.py", "sweepcore/placement.py", "jobs/serve.py",
         *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "cluster" / "driver").glob("*.py")),
         *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "opteval" / "sweepcore" / "backends").glob("*.py"))]


def test_serving_keys_read_by_the_code_are_in_the_schema():
    declared = {f.name for f in fields(ServingSection)}
    read: set[str] = set()
    for f in FILES:
        src = (ROOT / f).read_text()
        read |= set(re.findall(r"serving\.get\(\"(\w+)\"", src))
        read |= set(re.findall(r"cfg\.serving\.(\w+)", src))
        read |= set(re.findall(r"\bs\.(cpus_per_gpu|ingress_cpus)\b", src))
        read |= set(re.findall(r"\bserving\.([a-z_]+)\b(?!\()", src))  # the typed section, by attribute
    assert read, "the pattern found nothing: the test would pass vacuously"
    assert read <= declared, sorted(read - declared)


def test_vllm_keys_accepted_by_llm_serving_are_in_the_model_schema():
    assert _VLLM_KEYS <= {f.name for f in fields(VllmSection)}
