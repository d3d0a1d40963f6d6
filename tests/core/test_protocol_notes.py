"""A bar run under a stand-in for a model's own protocol says so (evalcore/protocols.py): the
sweep's printed table and the report's notes. StepORLM's protocol is not available to us
(arXiv 2509.22558; github.com/0xzhouchenyu/StepORLM could not be read), so Figure 4 runs it
under `direct`."""
from __future__ import annotations

import pandas as pd

from opteval.evalcore.protocols import protocol_notes
from opteval.sweepcore.config import load_config, model_config
from opteval.sweepcore.tracking import model_families, results_markdown


def test_only_the_stand_in_pairs_get_a_note():
    notes = protocol_notes([("StepORLM-Qwen3-8B", "direct"), ("StepORLM-Qwen3-8B", "direct"),
                            ("Qwen3-8B", "direct"), ("ORLM-LLaMA-3-8B", "orlm")])
    assert len(notes) == 1 and notes[0].startswith("StepORLM-Qwen3-8B / direct: not StepORLM's protocol")
    assert protocol_notes([("my-step", "direct")], {"my-step": "StepORLM"})  # by config family
    assert not protocol_notes([("StepORLM-Qwen3-8B", "opticycle")])


def test_figure4_prints_that_the_steporlm_bar_is_not_its_protocol():
    cfg = load_config(["configs/sweeps/figure4.yaml"])
    assert cfg.model_methods["StepORLM-Qwen3-8B"] == ["direct"]
    assert model_config("StepORLM-Qwen3-8B").family == "StepORLM"
    rows = [{"model": m, "method": x, "benchmark": "nl4opt", "avg": 0.5, "ci_low": 0.4, "ci_high": 0.6, "planned": 8,
             "missing": 0, "scored": 8} for m, xs in cfg.model_methods.items() for x in xs]
    text = results_markdown(pd.DataFrame(rows), "figure4", model_families(cfg.models))
    [line] = [ln for ln in text.splitlines() if "Not its protocol" in ln]
    assert "StepORLM-Qwen3-8B / direct" in line and "arXiv 2509.22558" in line
