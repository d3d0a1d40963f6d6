"""A cluster we start gives Serve's controller proxy health-check bounds a loaded machine can
meet (``cluster.runtime.SERVE_PATIENCE_ENV``): with Ray's 5 s readiness check a healthy proxy on
a busy CI box was killed in a loop and ``serve.start`` never returned (the loaded tier)."""
from __future__ import annotations

import pytest
import ray

from cluster.runtime import SERVE_PATIENCE_ENV

pytestmark = pytest.mark.ray


def _controller_bounds(_controller: object) -> dict[str, float]:
    from ray.serve._private import constants as c

    return {"RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": c.PROXY_READY_CHECK_TIMEOUT_S,
            "RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S": c.PROXY_HEALTH_CHECK_TIMEOUT_S,
            "RAY_SERVE_PROXY_HEALTH_CHECK_PERIOD_S": c.PROXY_HEALTH_CHECK_PERIOD_S,
            "RAY_SERVE_PROXY_GRACEFUL_SHUTDOWN_TIMEOUT_S": c.PROXY_GRACEFUL_SHUTDOWN_TIMEOUT_S}


def test_the_serve_controller_of_our_cluster_has_patient_proxy_checks(ray_cluster):
    from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

    controller = ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
    seen = ray.get(controller.__ray_call__.remote(_controller_bounds), timeout=120)
    assert seen == {k: float(v) for k, v in SERVE_PATIENCE_ENV.items()}
    assert seen["RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S"] > 5.0  # Ray's default, missed under load
