"""The paper's results section from several sweeps (evalcore/reporting/paper.py, jobs/paper_report.py)
on the synthetic sweeps of paper_synth.py, whose every value is worked out there by hand."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml

from opteval.evalcore.reporting import paper
from opteval.evalcore.reporting.paper import PaperReportError, merge, write_paper
from tests.report import paper_synth as synth

REPO = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[paper.Artefact], paper.Merged]:
    out = tmp_path_factory.mktemp("paper")
    m = merge(synth.three())
    return out, write_paper(m, out, synth.META), m


def test_every_pinned_artefact_is_written_with_its_extensions(written):
    out, arts, _ = written
    for name, exts in paper.ARTEFACTS.items():
        for ext in exts:
            assert (out / f"{name}{ext}").is_file(), f"{name}{ext}"
        if ".png" in exts:
            assert (out / f"{name}.png").read_bytes()[:8] == PNG
    names = {a.name for a in arts}
    assert {f"per_benchmark_{m}" for m in ("Qwen3-0.6B", "Qwen3-4B", "Qwen3-8B", "Phi-4-reasoning",
                                           "ORLM-LLaMA-3-8B", "StepORLM-Qwen3-8B")} <= names
    assert paper.BUDGET_CURVE not in names  # one budget level per cell here


def test_table2_macro_per_backbone_with_dagger_marks_and_the_papers_order(written):
    out, _, _ = written
    t2 = pd.read_csv(out / "table2.csv")
    # the paper's order of backbones; Phi-4 (Figure 5) and the post-trained models (Figure 4) are not rows
    assert list(t2["model"]) == ["Qwen3-0.6B", "Qwen3-4B", "Qwen3-8B"]
    r = t2.set_index("model")
    assert r.at["Qwen3-0.6B", "Direct Generation"] == 0.0
    assert r.at["Qwen3-0.6B", "OptiCycle"] == 25.0 and bool(r.at["Qwen3-0.6B", "OptiCycle_dagger"])  # (1/2 + 0/2)/2
    assert r.at["Qwen3-0.6B", "OptiCycle_planned"] == 4 and r.at["Qwen3-0.6B", "OptiCycle_scored"] == 3
    assert r.at["Qwen3-0.6B", "OptiState"] == 50.0 and r.at["Qwen3-0.6B", "OptiState_mark"] == "best"
    # Qwen3-4B comes from table1 (named first), not paper's all-wrong Direct
    assert r.at["Qwen3-4B", "Direct Generation"] == 50.0 and r.at["Qwen3-4B", "Direct Generation_sweep"] == "table1"
    assert r.at["Qwen3-4B", "OptiCycle"] == 75.0 and r.at["Qwen3-4B", "OptiState"] == 100.0
    assert pd.isna(r.at["Qwen3-8B", "Direct Generation"]) and r.at["Qwen3-8B", "OptiCycle_sweep"] == "figure4"
    md = (out / "table2.md").read_text()
    assert "| Qwen3-0.6B (simulated) | 0.00 | <u>25.00</u>† | **50.00** |" in md
    assert "| Qwen3-8B (simulated) | — | **50.00** | **50.00** |" in md
    assert ("rests on sweep table1: 12 planned, 12 scored trajectories; sweep paper: 12 planned, 11 scored "
            "trajectories; sweep figure4: 8 planned, 8 scored trajectories") in md


def test_table1_and_the_per_benchmark_tables(written):
    out, _, m = written
    md = (out / "table1.md").read_text()
    assert "rests on sweep table1: 16 planned, 16 scored trajectories" in md
    assert "| Direct Generation (simulated) | <u>50.00</u> | <u>50.00</u> | 50.00 | 1.50 |" in md
    assert "| CAFA (simulated) | **100.00** | 0.00 | 50.00 | 1.50 |" in md
    assert "| OptiCycle (simulated) | **100.00** | <u>50.00</u> | <u>75.00</u> | 4.00 |" in md  # (3000+1000)/1000
    t1 = pd.read_csv(out / "table1.csv")
    assert list(t1["method"]) == ["direct", "cafa", "opticycle", "optistate"]  # the paper's row order
    pb = (out / "per_benchmark_StepORLM-Qwen3-8B.md").read_text()
    # its error row counts as wrong; a lone method is the best of its backbone
    assert "| Direct Generation (simulated) | **50.00**† | **0.00** | **25.00**† |" in pb
    assert "sweep figure4: 4 planned, 3 scored" in pb
    assert m.notes == ["Qwen3-4B/direct is also in sweep paper: the report uses sweep table1's"]
    assert "Qwen3-4B/direct is also in sweep paper" in (out / "index.md").read_text()


def test_figures_2_to_5_numbers(written):
    out, _, _ = written
    f2l = pd.read_csv(out / "figure2_left.csv")
    assert list(f2l["model"]) == ["Qwen3-0.6B", "Qwen3-4B", "Qwen3-8B"]  # across backbones, the paper's order
    assert list(f2l["delta_points"]) == [25.0, 25.0, 0.0] and list(f2l["dagger"]) == [True, False, False]
    f2r = pd.read_csv(out / "figure2_right.csv")
    assert dict(zip(f2r["method"], f2r["tokens_k"])) == {"direct": 1.5, "cafa": 1.5, "opticycle": 4.0, "optistate": 1.5}
    f3 = pd.read_csv(out / "figure3.csv")
    oc = f3[f3["method"] == "opticycle"]
    assert list(oc["size_b"]) == [0.6, 4.0, 8.0] and list(oc["macro_pct"]) == [25.0, 75.0, 50.0]
    f4 = pd.read_csv(out / "figure4.csv")
    assert list(zip(f4["model"], f4["method"], f4["macro_pct"])) == [
        ("Qwen3-8B", "opticycle", 50.0), ("Qwen3-8B", "optistate", 50.0), ("ORLM-LLaMA-3-8B", "orlm", 25.0),
        ("StepORLM-Qwen3-8B", "direct", 25.0)]
    assert "not StepORLM's protocol" in str(f4.set_index("model").at["StepORLM-Qwen3-8B", "note"])
    assert set(f4["rests_on"]) == {"rests on sweep figure4: 16 planned, 15 scored trajectories"}
    f5 = pd.read_csv(out / "figure5.csv")
    assert list(zip(f5["model"], f5["method"], f5["macro_pct"])) == [
        ("Phi-4-reasoning", "direct", 25.0), ("Phi-4-reasoning", "opticycle", 50.0),
        ("Phi-4-reasoning", "optistate", 75.0)]


def test_mixed_grading_and_plans_are_refused_in_one_line():
    orlm = {**synth.GRADING, "nl4opt": "orlm"}
    with pytest.raises(PaperReportError) as exc:
        merge([synth.sweep("table1", synth.TABLE1), synth.sweep("figure4", synth.FIGURE4, grading=orlm)])
    assert str(exc.value) == ("sweeps table1 and figure4 grade nl4opt differently (optagentbench vs orlm); "
                              "a merged report needs one grading rule")
    with pytest.raises(PaperReportError) as exc:
        merge([synth.sweep("table1", synth.TABLE1), synth.sweep("paper", synth.PAPER, extra_problem=True)])
    assert str(exc.value).startswith("sweeps table1 and paper plan nl4opt differently (2 vs 3 problem x sample cells")
    assert "\n" not in str(exc.value)


def test_matched_budget_cells_are_marked_and_levels_give_the_curve(tmp_path: Path):
    spec = {("Qwen3-4B", "direct"): "RWWW", ("Qwen3-4B", "opticycle"): "RWRW"}
    high = {("Qwen3-4B", "direct"): "RWRW", ("Qwen3-4B", "opticycle"): "RRRW"}
    m = merge([synth.sweep("m8k", spec, match="tokens=8000"), synth.sweep("m16k", high, match="tokens=16000")])
    write_paper(m, tmp_path, synth.META)
    md = (tmp_path / "table2.md").read_text()
    assert "| Qwen3-4B (simulated) | <u>25.00</u>‡ | **50.00**‡ | — |" in md  # m8k is named first
    assert "‡: run under a matched budget (tokens=8000 per trajectory, every method)." in md
    curve = pd.read_csv(tmp_path / "budget_curve.csv")
    assert list(zip(curve["method"], curve["budget"], curve["macro_pct"])) == [
        ("direct", 8000, 25.0), ("direct", 16000, 50.0), ("opticycle", 8000, 50.0), ("opticycle", 16000, 75.0)]
    assert (tmp_path / "budget_curve.png").read_bytes()[:8] == PNG


def test_the_backbone_lists_are_the_sweep_configs():
    def models(name: str) -> list[str]:
        return yaml.safe_load((REPO / "configs" / "sweeps" / f"{name}.yaml").read_text())["models"]

    assert list(paper.PAPER_BACKBONES) == models("paper")
    assert list(paper.EXTRA_BACKBONES) == models("extra_backbones")
    assert [paper.FIGURE4_BACKBONE, *paper.POST_TRAINED] == models("figure4")


def _ledger(root: Path, name: str, spec: dict[tuple[str, str], str], grading: str = "optagentbench") -> None:
    """A real ledger (opteval.sweepcore.ledger.Ledger: manifest, plan.parquet, committed rows)."""
    from opteval.sweepcore.ledger import Ledger

    rows, plan = synth.rows_and_plan(name, spec)
    res = {"grading": {"profile": grading}, "benchmark_configs": {}}
    led = Ledger.open(str(root), name, res, "fp-" + name)
    led.record_plan([SimpleNamespace(**r) for r in plan])
    led.commit([{k: v for k, v in r.items() if v is not None} for r in rows])
    led.close()


def test_one_command_writes_the_section_and_refuses_a_mix(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from opteval.jobs import report

    for name, spec in (("table1", synth.TABLE1), ("paper", synth.PAPER), ("figure4", synth.FIGURE4)):
        _ledger(tmp_path, name, spec)
    nodata = tmp_path / "nodata"
    nodata.mkdir()
    out = tmp_path / "out"
    rc = report.main(["sweep.name=table1,paper,figure4", f"sweep.output_dir={tmp_path}", f"data.dir={nodata}",
                      "--out", str(out)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "table2: table2.md, table2.csv (rests on sweep table1: 12 planned, 12 scored" in cap.out
    assert pd.read_csv(out / "table2.csv").set_index("model").at["Qwen3-0.6B", "OptiCycle"] == 25.0
    for name, exts in paper.ARTEFACTS.items():
        assert all((out / f"{name}{ext}").is_file() for ext in exts)
    # the preset names extra_backbones too, which has no ledger here: left out, said so
    rc = report.main(["--preset", "paper", f"sweep.output_dir={tmp_path}", f"data.dir={nodata}"])
    cap = capsys.readouterr()
    assert rc == 0 and "sweep extra_backbones has no ledger" in cap.err
    assert (tmp_path / "paper_report" / "table1.md").is_file()
    _ledger(tmp_path, "orlm_run", synth.FIGURE4, grading="orlm")
    rc = report.main(["sweep.name=table1,orlm_run", f"sweep.output_dir={tmp_path}", f"data.dir={nodata}"])
    cap = capsys.readouterr()
    assert rc == 2 and "Traceback" not in cap.err
    assert cap.err.strip().splitlines()[-1] == ("error: sweeps table1 and orlm_run grade mamo_easy differently "
                                               "(optagentbench vs orlm); a merged report needs one grading rule")
    rc = report.main(["sweep.name=table1,nosuch", f"sweep.output_dir={tmp_path}"])
    assert rc == 2 and "no sweep 'nosuch'" in capsys.readouterr().err


def test_a_sweep_without_some_artefacts_says_which_and_why(tmp_path: Path):
    m = merge([synth.sweep("one", {("Qwen3-4B", "direct"): "RWRW"})])
    names = {a.name for a in write_paper(m, tmp_path, {})}
    assert names == {"table2", "per_benchmark_Qwen3-4B"}
    index = (tmp_path / "index.md").read_text()
    assert "- figure4: no post-trained model" in index and "- table1: no backbone ran an adapted baseline" in index


def test_budgets_match_gives_every_method_the_same_budget():
    from opteval.sweepcore.config import ConfigError, effective_budgets, load_config

    cfg = load_config(["methods=[direct,opticycle,optimus]", "budgets.match=tokens", "budgets.match_to=opticycle"])
    # optimus's own max_total_tokens is 600,000 (configs/methods/optimus.yaml); matched, it is OptiCycle's
    assert {effective_budgets(cfg, m).max_total_tokens for m in cfg.methods} == {400000}
    cfg = load_config(["methods=[direct,opticycle]", "budgets.match=calls", "budgets.match_to=3"])
    assert [effective_budgets(cfg, m).max_calls for m in cfg.methods] == [3, 3]
    assert effective_budgets(cfg, "opticycle").to_dict()["match"] == "calls"  # recorded in every trajectory
    with pytest.raises(ConfigError, match="budgets.match_to: is neither a number nor a method"):
        load_config(["budgets.match=tokens", "budgets.match_to=nosuch"])
    with pytest.raises(ConfigError, match="budgets.match: must be one of tokens, calls"):
        load_config(["budgets.match=time", "budgets.match_to=3"])
