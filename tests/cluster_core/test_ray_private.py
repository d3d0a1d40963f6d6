"""Private Ray APIs are reached through opteval.cluster.ray_private, which names the API and both Ray
versions in one line when Ray has moved one (the layering test keeps them out of everything else)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from opteval.cluster import ray_private

REPO = Path(__file__).resolve().parents[2]


def test_every_private_api_is_present_in_the_installed_ray():
    assert ray_private.check() == []
    out = subprocess.run([sys.executable, "-m", "opteval.cluster.ray_private"], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and "every private Ray API" in out.stdout, out.stderr[-2000:]


def test_a_moved_api_fails_in_one_line_naming_it_and_both_versions(monkeypatch):
    monkeypatch.setattr(ray_private, "installed_version", lambda: "2.61.0")
    with pytest.raises(ray_private.RayPrivateAPIError) as err:
        ray_private._attr("ray._private.state", "no_such_function")
    msg = str(err.value)
    assert "\n" not in msg and "ray._private.state.no_such_function" in msg
    assert "Ray moved it" in msg and "read from Ray 2.60" in msg and "installed Ray 2.61.0" in msg
    with pytest.raises(ray_private.RayPrivateAPIError, match=r"ray\._private\.gone.*installed Ray 2\.61\.0"):
        ray_private._module("ray._private.gone")


def test_check_lists_each_missing_api(monkeypatch):
    monkeypatch.setitem(ray_private.APIS, "ray._private.state", ("state", "vanished"))
    problems = ray_private.check()
    assert len(problems) == 1 and "ray._private.state.vanished" in problems[0]


def test_the_prefix_router_path_names_an_importable_class():
    module, name = ray_private.PREFIX_ROUTER_CLASS.split(":")
    assert ray_private._attr(module, name).__name__ == "PrefixCacheAffinityRouter"
