"""Benchmark registry and loading: counts, checksums, and errors that name file and line."""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from opteval.evalcore import problems as P
from opteval.evalcore.problems import BenchmarkLoadError, load_benchmark


def _write(path: Path, rows: list, raw_lines: dict[int, str] | None = None) -> Path:
    lines = [json.dumps(r) for r in rows]
    for i, text in (raw_lines or {}).items():
        lines[i] = text
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _row(i: int, answer=1.0) -> dict:
    return {"id": f"x-{i:04d}", "question": f"question {i}", "answer": answer, "source": "test"}


# -- registry ---------------------------------------------------------------------------


def test_registry_pins_the_nine_benchmarks_and_their_total():
    expected = {
        "nl4opt": 230, "mamo_easy": 652, "mamo_complex": 211, "nlp4lp": 242, "complexor": 18,
        "industryor": 100, "optibench": 605, "optmath": 166, "icml_competition": 410,
    }
    assert {s: P.REGISTRY[s].count for s in P.PRIMARY_SLUGS} == expected
    assert sum(expected.values()) == P.PRIMARY_TOTAL == 2634
    for slug in P.PRIMARY_SLUGS:
        e = P.REGISTRY[slug]
        assert e.upstream is not None and e.sha256 is not None
        assert e.primary and e.upstream.repo == "antgroup/LLMOPT"
        assert len(e.upstream.commit) == 40 and e.upstream.path.startswith("data/testset/")
        assert len(e.sha256) == 64


def test_registry_sirl_variants_and_sample():
    assert set(P.SIRL_SLUGS) == {
        "nl4opt@sirl", "mamo_easy@sirl", "mamo_complex@sirl", "industryor@sirl",
        "optmath@sirl", "optmath_193@sirl", "optibench@sirl",
    }
    e = P.REGISTRY["optmath_193@sirl"]
    assert e.relpath == "variants/sirl/optmath_193.jsonl" and e.id_prefix == "optmath_193-sirl"
    assert e.upstream is not None
    assert e.upstream.repo == "Cardinal-Operations/SIRL" and e.upstream.fmt == "sirl"
    assert e.upstream.url() == (
        "https://raw.githubusercontent.com/Cardinal-Operations/SIRL/"
        "8e85194b8f251ec229cc310c2c6e8794ead85682/test_data/OptMATH_Bench_193.jsonl"
    )
    assert P.REGISTRY["sample"].upstream is None


def test_pinned_checksums_match_the_shared_files(shared_benchmarks):
    for slug in P.PRIMARY_SLUGS + P.SIRL_SLUGS:
        entry = P.REGISTRY[slug]
        assert P.sha256_file(shared_benchmarks / entry.relpath) == entry.sha256, slug


def test_unknown_slug_names_known_ones():
    with pytest.raises(P.UnknownBenchmarkError, match="unknown benchmark 'nope'.*nl4opt"):
        load_benchmark("nope")


# -- loading the real files ---------------------------------------------------------------


def test_shared_directory_works_as_data_dir(shared_benchmarks):
    total = 0
    for slug in P.PRIMARY_SLUGS:
        specs, key = load_benchmark(slug, shared_benchmarks)
        assert len(specs) == len(key) == P.REGISTRY[slug].count
        assert all(s.benchmark == slug and s.id.startswith(f"{slug}-") for s in specs)
        assert all(s.id in key for s in specs)
        total += len(specs)
    assert total == 2634
    specs, key = load_benchmark("nl4opt@sirl", shared_benchmarks)
    assert len(specs) == 245 and sum(1 for a in key.answers.values() if a == "infeasible") == 17


def test_problem_spec_carries_no_answer(shared_benchmarks):
    assert [f.name for f in dataclasses.fields(P.ProblemSpec)] == ["benchmark", "id", "question"]
    specs, key = load_benchmark("complexor", shared_benchmarks)
    assert key["complexor-0001"] == 66.0 and isinstance(key["complexor-0001"], float)
    assert not any(hasattr(s, "answer") for s in specs)


def test_load_problem_ids_in_file_order(shared_benchmarks):
    ids = P.load_problem_ids("industryor", shared_benchmarks)
    assert ids[0] == "industryor-0001" and ids[-1] == "industryor-0100" and len(ids) == 100


def test_sample_benchmark_loads_from_the_package():
    specs, key = load_benchmark("sample")
    assert len(specs) >= 40 and len(key) == len(specs)
    assert all(s.benchmark == "sample" for s in specs)


# -- data directory resolution ------------------------------------------------------------


def test_data_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("OPTEVAL_DATA", str(tmp_path / "env"))
    assert P.data_dir(tmp_path / "cfg") == tmp_path / "cfg"
    assert P.data_dir() == tmp_path / "env"
    monkeypatch.delenv("OPTEVAL_DATA")
    assert P.data_dir() == Path("~/.cache/opteval/data").expanduser()


def test_env_data_dir_is_used_by_load(monkeypatch, shared_benchmarks):
    monkeypatch.setenv("OPTEVAL_DATA", str(shared_benchmarks))
    specs, _ = load_benchmark("complexor")
    assert len(specs) == 18


def test_missing_file_names_path_and_fetch_command(tmp_path):
    with pytest.raises(BenchmarkLoadError, match=r"nl4opt\.jsonl.*opteval data fetch nl4opt"):
        load_benchmark("nl4opt", tmp_path)


# -- errors naming file and line -----------------------------------------------------------


def test_bad_json_names_file_and_line(tmp_path):
    p = _write(tmp_path / "b.jsonl", [_row(1), _row(2), _row(3)], {1: '{"id": "x-0002", "question": '})
    with pytest.raises(BenchmarkLoadError, match=rf"{p}:2: invalid JSON"):
        P.load_jsonl(p, "b")


def test_missing_field_names_line_and_field(tmp_path):
    rows = [_row(1), _row(2), {"id": "x-0003", "question": "q"}]
    p = _write(tmp_path / "m.jsonl", rows)
    with pytest.raises(BenchmarkLoadError, match=rf"{p}:3: missing field\(s\) answer"):
        P.load_jsonl(p, "m")


def test_duplicate_id_names_both_lines(tmp_path):
    rows = [_row(1), _row(2), _row(3), _row(2)]
    p = _write(tmp_path / "d.jsonl", rows)
    with pytest.raises(BenchmarkLoadError, match=r"duplicate id 'x-0002' on lines 2 and 4"):
        P.load_jsonl(p, "d")


@pytest.mark.parametrize("bad", ["NaN", "Infinity", '"abc"', '"12"', "true", "null", "[1]"])
def test_bad_answer_names_line(tmp_path, bad):
    p = tmp_path / "a.jsonl"
    p.write_text(
        json.dumps(_row(1)) + "\n" + f'{{"id": "x-0002", "question": "q", "answer": {bad}, "source": "s"}}\n'
    )
    with pytest.raises(BenchmarkLoadError, match=rf"{p}:2: answer of 'x-0002'"):
        P.load_jsonl(p, "a")


def test_status_answers_are_accepted(tmp_path):
    p = _write(tmp_path / "s.jsonl", [_row(1, "infeasible"), _row(2, "Unbounded"), _row(3, -4)])
    _, key = P.load_jsonl(p, "s")
    assert key.answers == {"x-0001": "infeasible", "x-0002": "unbounded", "x-0003": -4.0}


def test_checksum_mismatch_names_file_and_verify_false_skips_it(tmp_path, shared_benchmarks):
    shutil.copy(shared_benchmarks / "complexor.jsonl", tmp_path / "complexor.jsonl")
    with open(tmp_path / "complexor.jsonl", "a") as f:
        f.write("\n")  # a blank line: same problems, different bytes
    with pytest.raises(BenchmarkLoadError, match=r"complexor\.jsonl: sha256 mismatch for 'complexor'"):
        load_benchmark("complexor", tmp_path)
    specs, _ = load_benchmark("complexor", tmp_path, verify=False)
    assert len(specs) == 18


def test_count_mismatch_is_an_error_even_without_verify(tmp_path, shared_benchmarks):
    lines = (shared_benchmarks / "complexor.jsonl").read_text().splitlines()[:-1]
    (tmp_path / "complexor.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(BenchmarkLoadError, match="has 17 problems, expected 18"):
        load_benchmark("complexor", tmp_path, verify=False)


def test_dump_jsonl_reproduces_the_pinned_bytes(shared_benchmarks):
    for slug in ("nl4opt", "mamo_easy", "nl4opt@sirl"):
        path = shared_benchmarks / P.REGISTRY[slug].relpath
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        assert P.sha256_bytes(P.dump_jsonl(rows)) == P.REGISTRY[slug].sha256
