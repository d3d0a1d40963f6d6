"""make_model dispatch: the simulated backend is imported lazily, only when asked for."""
from __future__ import annotations

import sys
import types

import pytest

from evalcore.models import make_model


def test_simulated_backend_is_dispatched_lazily(monkeypatch):
    seen = {}

    class FakeSimulated:
        @classmethod
        def from_config(cls, cfg):
            seen["cfg"] = cfg
            return cls()

    fake = types.ModuleType("evalcore.models.simulated")
    fake.SimulatedModel = FakeSimulated
    monkeypatch.setitem(sys.modules, "evalcore.models.simulated", fake)
    model = make_model({"name": "sim", "backend": "simulated", "skill": {"correct": 0.5}})
    assert isinstance(model, FakeSimulated)
    assert seen["cfg"] == {"name": "sim", "backend": "simulated", "skill": {"correct": 0.5}}


def test_missing_backend_names_key_and_model():
    with pytest.raises(ValueError, match=r"model 'x': unknown backend None \(config key 'backend'\)"):
        make_model({"name": "x"})


def test_deployment_keys_are_ignored_for_openai():
    model = make_model({"name": "q", "backend": "openai", "base_url": "http://127.0.0.1:1/v1", "model_id": "m",
                        "serving": {"num_replicas": 2}, "description": "a model"})
    assert model.url == "http://127.0.0.1:1/v1/chat/completions"
