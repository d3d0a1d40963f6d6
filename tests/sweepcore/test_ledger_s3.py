"""Ledger on an object store: a real S3 API (moto's server, in-process on 127.0.0.1).

The local-directory behaviour is in ``test_ledger.py``; here the same contracts are
checked through ``pyarrow.fs.S3FileSystem`` as built from ``s3://opteval-test/sweeps``
(the endpoint comes from ``AWS_ENDPOINT_URL``, or from the URI's query): the commit
goes through ``_tmp/`` and a server-side copy, and nothing temporary stays visible.
"""
from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import boto3
import pytest
from moto.server import ThreadedMotoServer

from opteval.evalcore.ledger_detail import encode_row
from opteval.evalcore.records import LEDGER_SCHEMA, CallRecord, ExecRecord, Submission, Trajectory
from opteval.sweepcore.config import load_config, resolved, sweep_fingerprint
from opteval.sweepcore.ledger import ConfigChangedError, DuplicateKeyError, Ledger, error_row, trajectory_row
from opteval.sweepcore.plan import expand_plan, remaining
from tests.sweepcore.ledger_reads import manifest_of, plan_of

REPO = Path(__file__).resolve().parents[2]
BUCKET = "opteval-test"
URI = f"s3://{BUCKET}/sweeps"
IDS = {"sample": [f"p{i}" for i in range(5)]}


@pytest.fixture(scope="module")
def moto_endpoint():
    """One moto S3 server for the module (``http://127.0.0.1:<port>``); reset per test."""
    werkzeug = logging.getLogger("werkzeug")
    level = werkzeug.level
    werkzeug.setLevel(logging.ERROR)  # one access-log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()
        werkzeug.setLevel(level)


def _aws_env(endpoint: str) -> dict[str, str]:
    return {
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint, "AWS_EC2_METADATA_DISABLED": "true",
    }


@pytest.fixture()
def s3(moto_endpoint, monkeypatch):
    """An empty ``opteval-test`` bucket and AWS env vars pointing at moto (this test only)."""
    urllib.request.urlopen(urllib.request.Request(f"{moto_endpoint}/moto-api/reset", method="POST"), timeout=10)
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "AWS_CONFIG_FILE",
                "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(var, raising=False)
    for k, v in _aws_env(moto_endpoint).items():
        monkeypatch.setenv(k, v)
    client = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    client.create_bucket(Bucket=BUCKET)
    return client


def _objects(client, prefix: str = "sweeps/") -> dict[str, int]:
    """Every object key under ``prefix`` -> size, as any S3 reader would list them."""
    out: dict[str, int] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        out.update({o["Key"]: o["Size"] for o in page.get("Contents", [])})
    return out


def _assert_no_temporaries(client, sweep: str = "demo") -> None:
    """No upload is left under ``_tmp/`` (pyarrow may keep the empty ``_tmp/`` marker)."""
    objs = _objects(client)
    left = {k: n for k, n in objs.items() if "/_tmp/" in k and not (k == f"sweeps/{sweep}/_tmp/" and n == 0)}
    assert not left, f"temporaries still visible: {left}"
    assert not [k for k in objs if k.endswith(".tmp")]


@pytest.fixture(autouse=True)
def _close_ledgers(monkeypatch):
    """Every ledger a test opens releases its lease before the bucket goes away (a held lease
    keeps a heartbeat thread that would otherwise log retries against a stopped server)."""
    opened: list[Ledger] = []
    real_open = Ledger.open.__func__  # type: ignore[attr-defined]

    def tracking_open(cls, *args, **kwargs):
        led = real_open(cls, *args, **kwargs)
        opened.append(led)
        return led

    monkeypatch.setattr(Ledger, "open", classmethod(tracking_open))
    yield
    for led in opened:
        with contextlib.suppress(Exception):  # a lease taken over by another test writer is gone already
            led.close()

def _setup(*extra):
    cfg = load_config([f"sweep.output_dir={URI}", "methods=[direct,opticycle]", "samples.default=2", *extra])
    res = resolved(cfg)
    return res, sweep_fingerprint(res), expand_plan(cfg, IDS)


def _row(item, value=7.0):
    t = Trajectory(model=item.model, method=item.method, benchmark=item.benchmark, problem_id=item.problem_id,
                   sample=item.sample, seed=42 + item.sample, status="submitted", submission=Submission(raw=value),
                   calls=[CallRecord(0, "generate", 10, 5, None, 0.1, "stop")],
                   execs=[ExecRecord(0, "ok", 0.1, 0.1, 0, submission=value)], simulated=True)
    return trajectory_row(t, key=item.key, correct=value == 7.0, profile="optagentbench",
                          fingerprint=item.fingerprint, sweep="demo", parsed=value)


def _by_key(rows):
    return {r["key"]: r for r in rows}


def test_s3_commit_resume_duplicates_and_read_back(s3):
    res, fp, plan = _setup()
    led = Ledger.open(URI, "demo", res, fp)
    assert led.object_store and led.uri == f"{URI}/demo"
    summary = led.record_plan(plan)
    assert summary["total"] == len(plan) > 12
    batches = [[_row(p) for p in plan[0:4]], [_row(p, 3.0) for p in plan[4:9]],
               [_row(plan[9]), error_row(plan[10], "worker died", 3, sweep="demo")]]
    written = [path for b in batches for path in led.commit(b)]
    assert all(w.startswith(f"{BUCKET}/sweeps/demo/trajectories/model=") for w in written)
    objs = _objects(s3)
    assert "sweeps/demo/manifest.json" in objs and "sweeps/demo/plan.parquet" in objs
    assert {f"{BUCKET}/{k}" for k in objs if k.endswith(".parquet") and "/trajectories/" in k} == set(written)
    # commits create no directory markers (a HEAD and a PUT per path level, per commit)
    assert not [k for k in objs if k.endswith("/") and "/trajectories" in k]
    _assert_no_temporaries(s3)

    committed = [r for b in batches for r in b]
    with pytest.raises(DuplicateKeyError):
        led.commit([_row(plan[2])])  # committed by this process

    led2 = Ledger.open(URI, "demo", res, fp)  # resume: keys come back from the bucket
    assert led2.committed_keys() == {r["key"] for r in committed}
    assert remaining(plan, led2.committed_keys()) == plan[11:]
    assert manifest_of(led2)["fingerprint"] == fp and manifest_of(led2)["plan"]["total"] == len(plan)
    assert plan_of(led2).column("key").to_pylist() == [p.key for p in plan]
    with pytest.raises(DuplicateKeyError):
        led2.commit([_row(plan[0])])  # committed on the store
    with pytest.raises(DuplicateKeyError):
        led2.commit([_row(plan[11]), _row(plan[11])])
    assert not led2.is_committed(plan[11].key)  # a refused commit wrote nothing

    table = led2.read_table()
    assert table.schema.names[: len(LEDGER_SCHEMA)] == LEDGER_SCHEMA.names
    got = _by_key(table.to_pylist())
    assert set(got) == {r["key"] for r in committed}
    for want in committed:
        row = got[want["key"]]
        assert row["committed_at"] is not None
        assert {k: v for k, v in row.items() if k != "committed_at"} == \
               {k: v for k, v in encode_row(want, led2.format).items() if k != "committed_at"}
    assert got[plan[10].key]["status"] == "error" and got[plan[10].key]["correct"] is False
    _assert_no_temporaries(s3)


def test_s3_changed_config_refused_unless_allowed(s3):
    res, fp, plan = _setup()
    Ledger.open(URI, "demo", res, fp).commit([_row(plan[0])])
    res2, fp2, _ = _setup("sampling.temperature=0.7")
    assert fp2 != fp
    with pytest.raises(ConfigChangedError) as err:
        Ledger.open(URI, "demo", res2, fp2)
    assert "sampling.temperature: 0.6 -> 0.7" in str(err.value) and f"{URI}/demo" in str(err.value)
    with pytest.raises(ConfigChangedError):
        Ledger.open(URI, "demo", res2, fp2, read_only=True)  # plan_only refuses too
    led = Ledger.open(URI, "demo", res2, fp2, allow_config_change=True)
    assert led.committed_keys() == {plan[0].key}
    assert manifest_of(led)["fingerprint"] == fp2
    assert manifest_of(led)["history"][-1]["changes"] == ["sampling.temperature: 0.6 -> 0.7"]
    _assert_no_temporaries(s3)


def test_s3_crash_before_publish_and_compaction(s3, monkeypatch):
    # the endpoint from the URI's query alone (no env var), as the module docstring documents
    endpoint = os.environ["AWS_ENDPOINT_URL"]
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    uri = f"{URI}?endpoint_override={endpoint.removeprefix('http://')}&scheme=http"
    res, fp, plan = _setup()
    led = Ledger.open(uri, "demo", res, fp, compact_every=3)
    assert led.uri.startswith(f"{URI}/demo?endpoint_override=")  # the query stays last
    direct = [p for p in plan if p.method == "direct"]
    for p in direct[:5]:
        led.commit([_row(p)])
    names = sorted(f.rsplit("/", 1)[-1].split("-")[0] for f in led.files())
    assert names == ["compact", "part", "part"]  # 3 parts merged (and deleted), 2 since
    assert len([k for k in _objects(s3) if "/trajectories/" in k and k.endswith(".parquet")]) == 3
    _assert_no_temporaries(s3)

    def crash(tmp, final):
        raise KeyboardInterrupt("killed between upload and copy")

    monkeypatch.setattr(led, "_publish", crash)
    with pytest.raises(KeyboardInterrupt):
        led.commit([_row(direct[5])])
    stray = [k for k in _objects(s3) if k.startswith("sweeps/demo/_tmp/") and k.endswith(".tmp")]
    assert len(stray) == 1  # the whole upload exists, but only under _tmp/ ...
    again = Ledger.open(uri, "demo", res, fp, read_only=True)
    assert again.committed_keys() == {p.key for p in direct[:5]}  # ... and is never read
    assert again.read_table().num_rows == 5
    assert stray[0] in _objects(s3)  # a read-only open deletes nothing
    Ledger.open(uri, "demo", res, fp)  # a writable open removes it
    _assert_no_temporaries(s3)


def test_plan_only_cli_reads_s3_and_writes_nothing(s3):
    from opteval.cluster.driver.prepare import prepare

    args = [f"sweep.output_dir={URI}", "samples.default=1", "methods=[direct]"]
    prep = prepare(load_config(args))  # writable: manifest + plan
    prep.ledger.commit([_row(p) for p in prep.plan[:3]])
    before = _objects(s3)
    env = {**os.environ, **_aws_env(os.environ["AWS_ENDPOINT_URL"])}
    proc = subprocess.run([sys.executable, str(REPO / "jobs" / "sweep.py"), "plan_only=true", *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"planned {len(prep.plan)} trajectories" in proc.stdout
    assert f"already committed: 3; to run: {len(prep.plan) - 3}" in proc.stdout, proc.stdout
    assert _objects(s3) == before  # plan_only opened read-only


def test_s3_lease_is_a_conditional_put_refuses_a_second_writer_and_goes_stale(s3):
    """The writer lease on S3: If-None-Match to take it, If-Match to beat and to take over."""
    import json as _json

    from opteval.sweepcore.lease import LeaseHeldError, LeaseLostError

    res, fp, plan = _setup()
    a = Ledger.open(URI, "demo", res, fp, lease_stale_s=30.0)
    body = _json.loads(s3.get_object(Bucket=BUCKET, Key="sweeps/demo/lease.json")["Body"].read())
    assert body["owner"] == a.lease.owner
    with pytest.raises(LeaseHeldError) as ei:
        Ledger.open(URI, "demo", res, fp, lease_stale_s=30.0)
    assert "last heartbeat" in str(ei.value) and "s3://opteval-test/sweeps/demo/lease.json" in str(ei.value)
    a.commit([_row(plan[0])])
    # a hung holder: its lease goes stale and is taken over by a conditional put
    a.lease._stop.set()
    body["heartbeat_at"], body["host"] = "2000-01-01T00:00:00+00:00", "elsewhere"
    a.lease.token = s3.put_object(Bucket=BUCKET, Key="sweeps/demo/lease.json", Body=_json.dumps(body))["ETag"]
    b = Ledger.open(URI, "demo", res, fp, lease_stale_s=30.0)
    with pytest.raises(LeaseLostError):
        a.commit([_row(plan[1])])
    b.commit([_row(plan[1])])
    a.close()
    assert _json.loads(s3.get_object(Bucket=BUCKET, Key="sweeps/demo/lease.json")["Body"].read())["owner"] == \
        b.lease.owner
    b.close()
    assert "sweeps/demo/lease.json" not in _objects(s3)
    assert b.committed_keys() == {plan[0].key, plan[1].key}
