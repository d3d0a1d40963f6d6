"""configs/methods/semopt*.yaml load through opteval.sweepcore.config, and bad params fail at load."""
from __future__ import annotations

import pytest

from opteval.evalcore.harnesses.semopt import SemOptParams
from opteval.sweepcore import config as cconf
from tests.configs_with import shipped


@pytest.mark.parametrize("name, gate, kind", [("semopt", True, "llm"), ("semopt_nogate", False, "llm"),
                                              ("semopt_rm", True, "reward_model")])
def test_shipped_semopt_methods_load_with_the_paper_values(name, gate, kind):
    params = SemOptParams.from_config(cconf.as_plain(cconf.method_config(name).params))
    assert (params.expansion, params.reflections, params.tau) == (4, 3, 0.6)  # paper: H, K, tau
    assert params.gate is gate and params.critic.kind == kind
    assert cconf.method_config(name).harness == "semopt"


def test_a_bad_param_fails_at_load_naming_key_and_file(configs_with):
    text = shipped("methods/semopt.yaml").replace("  tau: 0.6 ", "  tau: 6.0 ")
    configs_with({"methods/semopt_bad.yaml": text.replace("name: semopt\n", "name: semopt_bad\n")})
    with pytest.raises(cconf.ConfigError) as err:
        cconf.method_config("semopt_bad")
    assert "params.tau must be a number in [0, 1]" in str(err.value) and "semopt_bad.yaml" in str(err.value)
