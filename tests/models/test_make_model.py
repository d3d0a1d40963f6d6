"""make_model dispatch: the simulated backend is imported lazily, only when asked for; keys a
backend does not take are refused."""
from __future__ import annotations

import sys
import types

import pytest

from opteval.evalcore.models import make_model


def test_simulated_backend_is_dispatched_lazily(monkeypatch):
    seen = {}

    class FakeSimulated:
        @classmethod
        def from_config(cls, cfg):
            seen["cfg"] = cfg
            return cls()

    fake = types.ModuleType("opteval.evalcore.sim.policy")
    fake.SimulatedModel = FakeSimulated  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "opteval.evalcore.sim.policy", fake)
    model = make_model({"name": "sim", "backend": "simulated", "skill": {"correct": 0.5}})
    assert isinstance(model, FakeSimulated)
    assert seen["cfg"] == {"name": "sim", "backend": "simulated", "skill": {"correct": 0.5}}


def test_missing_backend_names_key_and_model():
    with pytest.raises(ValueError, match=r"model 'x': unknown backend None \(config key 'backend'\)"):
        make_model({"name": "x"})


def test_keys_outside_the_schema_are_refused_not_ignored():
    """A key no backend reads would do nothing: it is an error naming it, for every backend."""
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['description', 'serving'\] for backend 'openai'"):
        make_model({"name": "q", "backend": "openai", "base_url": "http://127.0.0.1:1/v1", "model_id": "m",
                    "serving": {"num_replicas": 2}, "description": "a model"})
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['engine_kwargs'\] for backend 'replay'"):
        make_model({"name": "r", "backend": "replay", "path": "x.jsonl", "engine_kwargs": {}})
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['deployment'\]"):
        make_model({"name": "s", "backend": "simulated", "deployment": {}})


def test_only_routes_of_apps_this_cluster_deployed_wait_when_refused():
    """A refused connection to our own Serve proxy is a proxy being replaced (wait for it, issue 42);
    to an endpoint elsewhere it is that server's failure (retried, then an error row)."""
    from opteval.sweepcore.endpoint import SERVE_ROUTE_WAIT_S, Endpoint

    ours = Endpoint(name="m", base_url="http://127.0.0.1:8000/v1", model_id="m", app_name="opteval-sim-m")
    theirs = Endpoint(name="m", base_url="http://10.0.0.5:8000/v1", model_id="m")
    from opteval.evalcore.models import OpenAIChatModel

    mine, other = ours.client(), theirs.client()
    assert isinstance(mine, OpenAIChatModel) and isinstance(other, OpenAIChatModel)
    assert mine.route_wait_s == SERVE_ROUTE_WAIT_S > 60  # longer than a proxy's replacement
    assert other.route_wait_s == 0.0
