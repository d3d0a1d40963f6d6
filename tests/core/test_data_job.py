"""jobs/data.py: fetch from a file:// or http:// base (normalized mirror or upstream layout),
conversion from the upstream formats, checksum refusal, atomic writes, list/verify CLI."""
from __future__ import annotations

import functools
import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from opteval.evalcore import problems as P
from opteval.jobs import data as data_job

REPO = Path(__file__).resolve().parents[2]


def _upstream(slug: str) -> P.Upstream:
    up = P.REGISTRY[slug].upstream
    assert up is not None, f"{slug} has no pinned upstream"
    return up


def _rows(shared: Path, slug: str) -> list[dict]:
    path = shared / P.REGISTRY[slug].relpath
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _make_upstream_mirror(shared: Path, root: Path, slugs) -> None:
    """Write files in the upstream formats under ``<root>/<repo>/<commit>/<path>``, rebuilt
    from the normalized ones: LLMOPT rows ``{index, question, answer}`` with the answer as
    a string; SIRL rows ``{en_question, en_answer}`` (no index) with SIRL's infeasible
    markers, and IndustryOR_fixedV2.json as one JSON array."""
    for slug in slugs:
        up = _upstream(slug)
        dest = root / up.repo / up.commit / up.path
        dest.parent.mkdir(parents=True, exist_ok=True)
        rows = _rows(shared, slug)
        if up.fmt == "llmopt":
            out = [
                {"index": int(r["id"].rsplit("-", 1)[1]), "question": r["question"], "answer": str(r["answer"])}
                for r in rows
            ]
        else:
            out = []
            for i, r in enumerate(rows):
                a = r["answer"]
                if a == "infeasible":
                    a = "No Best Solution" if i % 2 else -99999
                out.append({"en_question": r["question"], "en_answer": a if isinstance(a, int) else str(a)})
        if up.path.endswith(".json"):
            dest.write_text(json.dumps(out, ensure_ascii=False, indent=1), encoding="utf-8")
        else:
            dest.write_text("".join(json.dumps(o, ensure_ascii=False) + "\n" for o in out), encoding="utf-8")


def test_fetch_every_benchmark_from_file_base_and_load(shared_benchmarks, tmp_path):
    data = tmp_path / "data"
    base = shared_benchmarks.as_uri()
    total = 0
    for slug in data_job.expand_slugs(["all"]):
        r = data_job.fetch_one(slug, base, data)
        assert r.action == "written" and r.path == data / P.REGISTRY[slug].relpath
        specs, key = P.load_benchmark(slug, data)
        assert len(specs) == len(key) == P.REGISTRY[slug].count
        if slug in P.PRIMARY_SLUGS:
            total += len(specs)
    assert total == 2634
    assert not list(data.rglob("*.part")), "temp files left behind"
    # a second fetch finds the verified file and does not download again
    assert data_job.fetch_one("nl4opt", "file:///nonexistent", data).action == "present"


def test_fetch_converts_upstream_formats_to_the_pinned_bytes(shared_benchmarks, tmp_path):
    mirror = tmp_path / "mirror"
    slugs = ["nl4opt", "complexor", "optmath", "nl4opt@sirl", "mamo_complex@sirl", "industryor@sirl"]
    _make_upstream_mirror(shared_benchmarks, mirror, slugs)
    data = tmp_path / "data"
    for slug in slugs:
        r = data_job.fetch_one(slug, mirror.as_uri(), data)
        assert r.action == "written" and r.url is not None and r.url.endswith(_upstream(slug).path)
        assert P.sha256_file(r.path) == P.REGISTRY[slug].sha256
    _, key = P.load_benchmark("nl4opt@sirl", data)
    assert sum(1 for a in key.answers.values() if a == "infeasible") == 17


def test_convert_upstream_rules():
    entry = P.REGISTRY["nl4opt@sirl"]
    rows: list[dict[str, Any]] = [
        {"en_question": "a", "en_answer": "700.0"},
        {"en_question": "b", "en_answer": "12"},
        {"en_question": "c", "en_answer": "No Best Solution"},
        {"en_question": "d", "en_answer": -9999},
        {"en_question": "e", "en_answer": 3.5, "index": 9},
    ]
    out = P.convert_upstream(rows, entry)
    assert [r["id"] for r in out] == [f"nl4opt-sirl-000{i}" for i in (1, 2, 3, 4, 9)]
    assert [r["answer"] for r in out] == [700.0, 12, "infeasible", "infeasible", 3.5]
    assert isinstance(out[1]["answer"], int) and isinstance(out[0]["answer"], float)
    assert out[0]["source"] == _upstream("nl4opt@sirl").source
    # -9999 means infeasible only in SIRL data; in LLMOPT data it stays a number
    llm = P.convert_upstream([{"question": "q", "answer": -9999, "index": 1}], P.REGISTRY["nl4opt"])
    assert llm[0]["answer"] == -9999
    with pytest.raises(P.BenchmarkLoadError, match="row 1.*not a number"):
        P.convert_upstream([{"question": "q", "answer": "lots"}], P.REGISTRY["nl4opt"])


def test_checksum_mismatch_writes_nothing(shared_benchmarks, tmp_path):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    text = (shared_benchmarks / "complexor.jsonl").read_text(encoding="utf-8")
    (mirror / "complexor.jsonl").write_text(text.replace('"answer": 66', '"answer": 67', 1), encoding="utf-8")
    data = tmp_path / "data"
    with pytest.raises(data_job.FetchError, match=r"complexor: sha256 .* pinned .* nothing written"):
        data_job.fetch_one("complexor", mirror.as_uri(), data)
    assert not (data / "complexor.jsonl").exists()
    assert not list(data.rglob("*")) if data.exists() else True


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest output clean
        pass


def test_fetch_over_http_falls_back_from_normalized_to_upstream_layout(shared_benchmarks, tmp_path):
    mirror = tmp_path / "www"
    _make_upstream_mirror(shared_benchmarks, mirror, ["complexor"])
    handler = functools.partial(_QuietHandler, directory=str(mirror))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        r = data_job.fetch_one("complexor", base, tmp_path / "data")
    finally:
        server.shutdown()
        server.server_close()
    assert r.action == "written" and r.url is not None and "/antgroup/LLMOPT/" in r.url
    assert P.sha256_file(r.path) == P.REGISTRY["complexor"].sha256


def test_base_url_precedence(monkeypatch, tmp_path):
    monkeypatch.delenv("OPTEVAL_DATA_BASE_URL", raising=False)
    assert data_job.base_url() == "https://raw.githubusercontent.com"
    assert data_job.base_url(cfg_value="http://cfg") == "http://cfg"
    monkeypatch.setenv("OPTEVAL_DATA_BASE_URL", "http://env")
    assert data_job.base_url(cfg_value="http://cfg") == "http://env"
    assert data_job.base_url("http://flag", "http://cfg") == "http://flag"
    assert data_job.base_url(str(tmp_path)) == tmp_path.as_uri()


def test_cli_fetch_list_verify(shared_benchmarks, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("OPTEVAL_DATA", "OPTEVAL_DATA_BASE_URL")}
    env["OPTEVAL_DATA"] = str(tmp_path / "data")
    run = functools.partial(subprocess.run, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    script = [sys.executable, "jobs/data.py"]
    r = run(script + ["fetch", "complexor", "nl4opt@sirl", "--base-url", shared_benchmarks.as_uri()])
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "data" / "variants" / "sirl" / "nl4opt.jsonl").exists()
    r = run(script + ["list"])
    lines = {ln.split()[0]: ln.split() for ln in r.stdout.splitlines()[2:]}
    assert r.returncode == 0
    assert lines["complexor"][1:] == ["18", "yes", "yes"] and lines["nl4opt"][1:] == ["230", "no", "no"]
    r = run(script + ["verify", "complexor", "nl4opt@sirl"])
    assert r.returncode == 0 and "245 problems" in r.stdout
    r = run(script + ["verify", "nl4opt"])
    assert r.returncode == 1 and "nl4opt.jsonl" in r.stderr
    r = run(script + ["fetch", "nope"])
    assert r.returncode == 2 and "unknown benchmark 'nope'" in r.stderr
