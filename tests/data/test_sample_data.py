"""Static checks on the embedded sample benchmark: shape, coverage, answer hygiene."""
from __future__ import annotations

import json
import math
import re
from collections import Counter

import pytest

from opteval.evalcore.data import REFERENCE_DIR, SAMPLE_JSONL, load_sample_rows, reference_ids, reference_program
from opteval.evalcore.data._build import all_specs, header

KINDS = {"lp", "milp", "binary", "integer", "qp", "nlp"}
LIBRARIES = {"pulp", "pyscipopt", "scipy", "highspy"}


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return load_sample_rows()


def _numeric(rows):
    return [r for r in rows if not isinstance(r["answer"], str)]


def test_rows_have_the_normalized_fields(rows):
    assert len(rows) >= 44
    for r in rows:
        assert {"id", "question", "answer", "source", "kind", "library", "n_vars"} <= set(r), r.get("id")
        assert re.fullmatch(r"sample-\d{4}", r["id"]), r["id"]
        assert r["source"] == "opteval/sample"
        assert r["kind"] in KINDS, r["id"]
        assert r["library"] in LIBRARIES, r["id"]
        assert isinstance(r["n_vars"], int) and r["n_vars"] >= 2, r["id"]
        a = r["answer"]
        if isinstance(a, str):
            assert a in ("infeasible", "unbounded"), r["id"]
        else:
            assert isinstance(a, (int, float)) and not isinstance(a, bool) and math.isfinite(a), r["id"]
        assert len(r["question"]) > 100, r["id"]


def test_ids_are_unique(rows):
    ids = [r["id"] for r in rows]
    dupes = [i for i, n in Counter(ids).items() if n > 1]
    assert not dupes


def test_coverage_of_kinds_statuses_libraries_and_sizes(rows):
    answers = Counter(r["answer"] for r in rows if isinstance(r["answer"], str))
    assert answers["infeasible"] >= 3
    assert answers["unbounded"] >= 2
    kinds = Counter(r["kind"] for r in rows)
    assert kinds["qp"] + kinds["nlp"] >= 2
    assert kinds["binary"] >= 1 and kinds["integer"] >= 1 and kinds["milp"] >= 1 and kinds["lp"] >= 1
    libs = Counter(r["library"] for r in rows)
    assert set(libs) == LIBRARIES
    assert min(libs[k] for k in ("pulp", "pyscipopt", "scipy")) >= 3
    sizes = [r["n_vars"] for r in rows]
    assert min(sizes) == 2 and max(sizes) >= 150


def _answer_spellings(a: float) -> set[str]:
    """Ways an answer could leak into the text: plain, 2/4 decimals, thousands separators."""
    out = {f"{a:g}", repr(a), f"{a:.2f}", f"{a:.4f}".rstrip("0").rstrip("."), f"{a:,.2f}"}
    if float(a).is_integer():
        out |= {str(int(a)), f"{int(a):,}"}
    return {s for s in out if s}


def _significant_digits(a: float) -> int:
    digits = re.sub(r"[^0-9]", "", f"{abs(a):.4f}".rstrip("0").rstrip(".")).lstrip("0")
    return len(digits)


def test_no_question_states_its_answer(rows):
    leaks = []
    for r in _numeric(rows):
        a = r["answer"]
        if _significant_digits(a) < 3:
            continue
        for s in _answer_spellings(a):
            if re.search(rf"(?<![\d.,]){re.escape(s)}(?![\d]|[.,]\d)", r["question"]):
                leaks.append((r["id"], s))
    assert not leaks


def test_leak_check_would_catch_a_leak():
    # guards the guard: a question quoting 1,214,300 must be flagged for answer 1214300
    text = "the answer is 1,214,300 dollars"
    assert any(re.search(rf"(?<![\d.,]){re.escape(s)}(?![\d]|[.,]\d)", text)
               for s in _answer_spellings(1214300))


def test_every_problem_has_a_reference_program_and_vice_versa(rows):
    assert sorted(r["id"] for r in rows) == reference_ids()
    for r in rows:
        code = reference_program(r["id"])
        assert code is not None and "submit(" in code, r["id"]


def test_reference_program_lookup_rejects_unknown_and_unsafe_ids():
    assert reference_program("sample-9999") is None
    assert reference_program("../__init__") is None
    assert reference_program("sample-0001/../../x") is None


def test_committed_files_match_the_builder_specs(rows):
    """sample.jsonl and reference/*.py are what _build.py would write (nobody hand-edited one)."""
    specs = {s.id: s for s in all_specs()}
    assert set(specs) == {r["id"] for r in rows}
    for r in rows:
        s = specs[r["id"]]
        assert (s.question, s.kind, s.library, s.n_vars) == (r["question"], r["kind"], r["library"], r["n_vars"]), r["id"]
        assert (REFERENCE_DIR / f"{s.id}.py").read_text() == header(s) + s.code, s.id


def test_load_sample_rows_names_file_and_line_on_bad_json(tmp_path, monkeypatch):
    import opteval.evalcore.data as data

    bad = tmp_path / "sample.jsonl"
    bad.write_text(json.dumps({"id": "sample-0001"}) + "\n{not json\n")
    monkeypatch.setattr(data, "SAMPLE_JSONL", bad)
    with pytest.raises(ValueError, match=r"sample\.jsonl:2"):
        data.load_sample_rows()
    assert SAMPLE_JSONL.name == "sample.jsonl"
