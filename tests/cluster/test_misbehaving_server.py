"""Sweeps against an OpenAI-compatible server that misbehaves as real ones do (issue 27): a
refused request shape stops the sweep before dispatch (exit 2, one line), a server that dies
mid-sweep leaves error rows and exit 4, truncated calls are counted per cell, a command-line
``sampling.max_tokens`` is what the server receives, a 400 every call gets stops the model, and
an interrupted sweep leaves no request generating on the server.
"""
from __future__ import annotations

import json
import re
import signal

import pytest

from opteval.jobs.sweep import main as sweep_main
from tests.servers.openai_fake import FakeOpenAIServer

pytestmark = pytest.mark.ray


def _model(name: str, server: FakeOpenAIServer, sampling: str = "{}") -> str:
    return (f"[{{name: {name}, backend: openai, family: test, openai: {{base_url: '{server.base_url}', "
            f"model_id: {server.model_id}, api_key_env: OPTEVAL_TEST_NO_KEY, max_retries: 0, backoff_s: 0.01}}, "
            f"sampling: {sampling}}}]")


def _args(h, tmp_path, port, name, models, *extra, limit=2, tracking=False):
    off = () if tracking else ("tracking.enabled=false",)
    return h.sweep_args(tmp_path, name, port, *off, "cluster.retries=0", *extra,
                        models=models, methods="[direct]", limit=limit, samples=1)


def _report_module():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("report_job", Path(__file__).resolve().parents[2] / "jobs" / "report.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _config_lines(err: str) -> list[str]:
    """The driver's own error lines (worker log lines reach stderr too, prefixed by Ray)."""
    assert "Traceback" not in err, err[-3000:]
    return [ln for ln in err.splitlines() if ln.startswith("config error")]


@pytest.mark.parametrize("reported", [True, False], ids=["models-endpoint", "refused-request"])
def test_a_refused_request_shape_stops_before_dispatch(ray_cluster, h, tmp_path, capsys, reported):
    _, port = ray_cluster
    name = f"refuse-{reported}"
    with FakeOpenAIServer(max_model_len=4096, report_max_model_len=reported) as server:
        code = sweep_main(_args(h, tmp_path, port, name, _model(f"rej{int(reported)}", server)))
        chats = server.chats
    out, err = capsys.readouterr()
    assert code == 2, out[-2000:] + err[-2000:]
    lines = _config_lines(err)
    assert len(lines) == 1 and lines[0].startswith("config error: model "), err
    if reported:  # read from /v1/models: nothing was sent
        assert "max_tokens=16384 > max_model_len=4096: set sampling.max_tokens" in lines[0]
        assert chats == 0
    else:  # the one preflight request, refused with vLLM's text
        assert "max_tokens=16384: the server refused the sweep's request with HTTP 400" in lines[0]
        assert "cannot be greater than max_model_len" in lines[0] and "set sampling.max_tokens" in lines[0]
        assert chats == 1
    assert len(h.ledger_frame(tmp_path, name)) == 0  # no trajectory ran


def test_a_server_that_dies_mid_sweep_gives_error_rows_and_exit_4(ray_cluster, h, tmp_path, capsys):
    _, port = ray_cluster
    with FakeOpenAIServer(die_after=3) as server:  # the preflight and two calls, then gone
        code = sweep_main(_args(h, tmp_path, port, "dies", _model("dies", server), limit=5))
    out, err = capsys.readouterr()
    df = h.ledger_frame(tmp_path, "dies")
    assert code == 4, out[-3000:] + err[-2000:]
    assert len(df) == 5 and (df["status"] == "error").sum() >= 3, df[["status", "error"]].to_string()
    n = int((df["status"] == "error").sum())
    assert f"sweep ended with {n} status=error row(s) (exit 4)" in err
    assert "sweep.retry_errors=true" in err and "endpoint unreachable" in err


def test_truncated_calls_per_cell_and_the_command_line_max_tokens_reach_the_server(ray_cluster, h, tmp_path, capsys):
    _, port = ray_cluster
    with FakeOpenAIServer(max_model_len=4096, finish_reason="length") as server:
        args = _args(h, tmp_path, port, "trunc", _model("trunc", server, "{max_tokens: 512}"),
                     "sampling.max_tokens=128", limit=3, tracking=True)
        code = sweep_main(args)
        bodies = [r["body"] for r in server.records]
    out, err = capsys.readouterr()
    assert code == 0, out[-3000:] + err[-2000:]
    # the command line beat the model YAML's 512, in every request (the preflight's included), and said so
    assert len(bodies) == 4 and {b["max_tokens"] for b in bodies} == {128}
    assert "sampling.max_tokens=128 (command line) over its YAML's 512" in out
    assert "[sweep] MLflow holds every result of this sweep" in out, out[-3000:] + err[-2000:]
    header = next(ln for ln in out.splitlines() if ln.startswith("| model | method | benchmark |"))
    row = next(ln for ln in out.splitlines() if ln.startswith("| trunc | direct | sample |"))
    cells = dict(zip([c.strip() for c in header.strip("|").split("|")], [c.strip() for c in row.strip("|").split("|")]))
    assert cells["truncated calls"] == "3" and cells["rejected calls"] == "0", row
    calls = [c for raw in h.ledger_frame(tmp_path, "trunc")["calls"] for c in json.loads(raw)]
    assert [c["finish_reason"] for c in calls] == ["length"] * 3
    # MLflow: the child run's metrics
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("opteval")
    assert exp is not None
    runs = [r for r in client.search_runs([exp.experiment_id], filter_string="tags.`opteval.sweep` = 'trunc'")
            if r.data.tags.get("method") == "direct"]
    assert len(runs) == 1 and runs[0].data.metrics["truncated_calls/sample"] == 3.0
    assert runs[0].data.metrics["rejected_calls/sample"] == 0.0
    # summary.json of the report
    report = _report_module()
    assert report.main(["sweep.name=trunc", f"sweep.output_dir={tmp_path}", "tracking.enabled=false",
                        "--out", str(tmp_path / "report")]) == 0
    recs = json.loads((tmp_path / "report" / "summary.json").read_text())["records"]
    cell = next(r for r in recs if (r["model"], r["method"], r["benchmark"]) == ("trunc", "direct", "sample"))
    assert cell["truncated_calls"] == 3 and cell["rejected_calls"] == 0


def test_the_same_400_on_every_call_stops_the_models_dispatch(ray_cluster, h, tmp_path, capsys):
    _, port = ray_cluster
    text = "CPU Generator does not use offset"
    with FakeOpenAIServer(reject_after=1, reject_text=text) as server:  # the preflight passes, then every call 400s
        code = sweep_main(_args(h, tmp_path, port, "streak", _model("streak", server), "sweep.reject_streak=3",
                                "cluster.max_in_flight_per_model=1", limit=8))
    out, err = capsys.readouterr()
    df = h.ledger_frame(tmp_path, "streak")
    assert code == 2, out[-3000:] + err[-2000:]
    assert 3 <= len(df) < 8  # dispatch stopped after the streak, not the whole plan
    lines = _config_lines(err)
    assert len(lines) == 1 and "model 'streak'" in lines[0] and text in lines[0] and "3 calls in a row" in lines[0]


def test_an_abandoned_trajectory_closes_its_request(ray_cluster, h, tmp_path, capsys):
    """A trajectory past its timeout is cancelled on the worker: its HTTP request is closed, and
    the server (as vLLM does) sees the client go and stops generating."""
    _, port = ray_cluster
    with FakeOpenAIServer(slow_s=120, slow_after=1) as server:
        code = sweep_main(_args(h, tmp_path, port, "abandon", _model("abandon", server),
                                "cluster.trajectory_timeout_s=4", limit=1))
        h.wait_for(lambda: server.open == 0, 30, "the server to see the abandoned request closed")
        aborted = server.aborted
    out, err = capsys.readouterr()
    assert code == 4, out[-3000:] + err[-2000:]
    assert aborted == 1
    assert "trajectory timeout" in h.ledger_frame(tmp_path, "abandon")["error"].iloc[0]


def test_a_second_ctrl_c_leaves_no_request_generating(ray_cluster, h, tmp_path):
    address, port = ray_cluster
    with FakeOpenAIServer(slow_s=300, slow_after=1) as server:
        log = tmp_path / "ctrlc.log"
        args = _args(h, tmp_path, port, "ctrlc", _model("ctrlc", server), limit=3)
        proc = h.spawn_sweep(args, address, log)
        try:
            h.wait_for(lambda: server.open >= 3 or proc.poll() is not None, 240, "three requests generating")
            assert proc.poll() is None, log.read_text()[-3000:]
            proc.send_signal(signal.SIGINT)
            h.wait_for(lambda: "no new trajectories" in log.read_text() or proc.poll() is not None, 30, "the first signal")
            proc.send_signal(signal.SIGINT)
            rc = proc.wait(timeout=180)
        finally:
            if proc.poll() is None:
                proc.kill()
        h.wait_for(lambda: server.open == 0, 30, "no request still generating after the sweep exited")
        assert server.aborted == 3
    assert rc == 130, log.read_text()[-3000:]


def _garbled(n: int) -> bool:
    """30% of replies cut in half, the first (the preflight's) included; never five in a row."""
    return n == 1 or n % 10 in (3, 6, 9)


def test_a_server_garbling_30_percent_of_replies_costs_no_trajectory_retry(ray_cluster, h, tmp_path, capsys):
    _, port = ray_cluster
    model = ("[{name: garbled, backend: openai, family: test, openai: {base_url: '{url}', "
             "model_id: fake-model, api_key_env: OPTEVAL_TEST_NO_KEY, max_retries: 4, backoff_s: 0.01}}]")
    with FakeOpenAIServer(garble=_garbled) as server:
        args = h.sweep_args(tmp_path, "garbled", port, "tracking.enabled=false", "cluster.retries=2",
                            models=model.replace("{url}", server.base_url), methods="[direct,opticycle]",
                            limit=4, samples=1)
        code = sweep_main(args)
        chats, garbled = server.chats, server.garbled
    out, err = capsys.readouterr()
    df = h.ledger_frame(tmp_path, "garbled")
    assert code == 0, out[-3000:] + err[-2000:]
    assert "Traceback" not in err and "config error" not in err, err[-3000:]
    assert len(df) == 8 and (df["status"] != "error").all(), df[["status", "error"]].to_string()
    # no trajectory rerun for a garbled reply; a rerun for another cause (a trajectory timeout on a
    # machine loaded by other work: seen once, its cause not kept) is named on its retry line and allowed
    reruns = dict(re.findall(r"\[sweep\] retry \d+/\d+ (\S+): (.*)", out))
    assert not [r for r in reruns.values() if "malformed" in r or "garbl" in r], reruns
    again = df[df["attempts"] > 1]
    assert set(again["key"]) <= set(reruns), (df[["key", "attempts", "error"]].to_string(), reruns)
    assert len(again) <= 1, (df[["key", "attempts", "error"]].to_string(), reruns)
    assert garbled >= 3
    # every garbled reply was one more request within its call: the calls the ledger holds, the
    # preflight's one answered request, and the garbled ones are all the server saw (a rerun for
    # another cause adds its first attempt's calls)
    seen = int(df["n_calls"].sum()) + 1 + garbled
    assert seen == chats if not reruns else seen <= chats, (seen, chats, reruns)
