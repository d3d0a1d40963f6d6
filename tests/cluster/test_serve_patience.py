"""A cluster we start gives Serve's controller proxy health-check bounds a loaded machine can
meet (``opteval.cluster.runtime.SERVE_PATIENCE_ENV``): with Ray's 5 s readiness check a healthy proxy on
a busy CI box was killed in a loop and ``serve.start`` never returned (the loaded tier)."""
from __future__ import annotations

import pytest
import ray

from opteval.cluster.runtime import SERVE_PATIENCE_ENV

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


def _ray_gave_up_on_the_proxy(*_args: object, **_kwargs: object) -> None:
    raise TimeoutError("HTTP proxies not available after 60s.")


def test_a_proxy_slower_than_rays_60_s_is_waited_for(ray_cluster, monkeypatch, capsys):
    # what the loaded tier hit: serve.start gives the proxy a fixed 60 s while the controller is
    # up and still starting it; start-up waits for it to report HEALTHY instead of a traceback
    from ray import serve

    from opteval.cluster.serve.serve_apps import start_serve

    _, port = ray_cluster
    monkeypatch.setattr(serve, "start", _ray_gave_up_on_the_proxy)
    start_serve("127.0.0.1", port)
    out = capsys.readouterr().out
    assert "not up after Ray's 60 s" in out and "OPTEVAL_SERVE_PROXY_WAIT_S" in out
    assert "Serve's HTTP proxy is up" in out
    assert all(str(getattr(st, "value", st)) == "HEALTHY" for st in serve.status().proxies.values())


def test_a_proxy_that_never_comes_up_is_one_startup_line(ray_cluster, monkeypatch):
    from ray import serve
    from ray.serve.schema import ProxyStatus

    from opteval.cluster.runtime import RayStartupError
    from opteval.cluster.serve import serve_apps

    class Stuck:
        proxies = {"node-abcdef0123456789": ProxyStatus.STARTING}

    _, port = ray_cluster
    monkeypatch.setattr(serve, "start", _ray_gave_up_on_the_proxy)
    monkeypatch.setattr(serve, "status", lambda: Stuck())
    monkeypatch.setenv(serve_apps.PROXY_WAIT_ENV, "0.5")
    with pytest.raises(RayStartupError) as err:
        serve_apps.start_serve("127.0.0.1", port)
    msg = str(err.value)
    assert "\n" not in msg and "node-abcdef0: STARTING" in msg and "OPTEVAL_SERVE_PROXY_WAIT_S" in msg


def test_a_bad_proxy_wait_setting_names_the_variable(monkeypatch):
    from opteval.cluster.serve import serve_apps

    monkeypatch.setenv(serve_apps.PROXY_WAIT_ENV, "ten minutes")
    with pytest.raises(ValueError, match="OPTEVAL_SERVE_PROXY_WAIT_S='ten minutes'"):
        serve_apps.proxy_wait_s()
