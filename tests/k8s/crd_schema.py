"""Strict validation of ray.io objects against KubeRay's CRDs (ray-project/kuberay@feeaf72fa
``ray-operator/config/crd/bases/ray.io_*.yaml``, Apache-2.0; CI lays them beside the checkout).

The API server prunes unknown fields of a structural CRD silently; a typo in a manifest
(``nodeselector``, ``rayStartParam``) would vanish on apply. Here every object schema that
lists its ``properties`` and neither allows ``additionalProperties`` nor says
``x-kubernetes-preserve-unknown-fields`` rejects unknown keys. CEL rules
(``x-kubernetes-validations``) are not evaluated.
"""
from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

CRD_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "kuberay-crds"
CRD_FILES = {"RayCluster": "ray.io_rayclusters.yaml", "RayJob": "ray.io_rayjobs.yaml",
             "RayService": "ray.io_rayservices.yaml"}


def _strict(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_strict(x) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if ("properties" in out and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


@cache
def validator(kind: str, version: str = "v1") -> jsonschema.Draft7Validator:
    # libyaml's loader where PyYAML has it: the CRDs are 1-1.4 MB, 5 s each in pure Python
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load((CRD_DIR / CRD_FILES[kind]).read_text(), Loader=loader)
    assert crd["spec"]["names"]["kind"] == kind and crd["spec"]["group"] == "ray.io"
    vers = {v["name"]: v for v in crd["spec"]["versions"]}
    schema = _strict(copy.deepcopy(vers[version]["schema"]["openAPIV3Schema"]))
    return jsonschema.Draft7Validator(schema)


def errors(doc: dict[str, Any]) -> list[str]:
    """Every schema violation of one ray.io object, as ``path: message`` lines."""
    api = doc.get("apiVersion", "")
    if api != "ray.io/v1":
        return [f"apiVersion {api!r} is not ray.io/v1"]
    v = validator(doc["kind"])
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
            for e in sorted(v.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))]
