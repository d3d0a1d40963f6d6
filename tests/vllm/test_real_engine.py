"""SmolLM2-135M-Instruct through vLLM's CPU engine inside Ray Serve LLM, by the project's own
``backend: vllm`` path (``configs/models/smollm2-135m-cpu.yaml``, ``serving.accelerator_type``
unset, CPU placement): a sweep, its readiness and teardown, and ``opteval serve`` with the
``openai`` client. Nothing here is faked: the token counts are vLLM's, read from its responses.
"""
from __future__ import annotations

import asyncio
import collections
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.vllm.conftest import MODEL, REPO, engine_processes, serve_apps, wait_for
from tests.vllm.recording_proxy import RecordingProxy

pytestmark = pytest.mark.vllm
MAX_TOKENS = 96  # a short answer: the point is the path, not the model's accuracy
PROBLEMS = 3


def _header(ex: Any, name: str) -> str | None:
    return next((v for k, v in ex.headers.items() if k.lower() == name.lower()), None)


def _usage(response: Any) -> tuple[int | None, int | None, int | None]:
    u = response.get("usage") if isinstance(response, dict) else None
    if not isinstance(u, dict):
        return (None, None, None)
    cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens")
    return (u.get("prompt_tokens"), u.get("completion_tokens"), cached)


def _ledger(out: Path, name: str) -> Any:
    from tests.cluster.conftest import format1_frame  # format 1's view: detail as JSON text, error as text

    return format1_frame(out, name)


def test_sweep_commits_every_trajectory_with_vllms_own_token_counts(tier_ray, smollm2, tmp_path):
    """direct + opticycle on 3 sample problems x 1 sample, behind the prefix-aware router: every
    planned trajectory committed, none ``error``, the ledger's per-call token counts exactly what
    vLLM answered (prompt token details included); readiness answered a 1-token request before the
    first trajectory's call; the app and its engine gone at the end."""
    from opteval.jobs.sweep import main as sweep

    _, serve_port = tier_ray
    proxy = RecordingProxy(f"http://127.0.0.1:{serve_port}")
    port = proxy.start()  # the sweep's serving.http_port: every request passes through the recorder
    try:
        name = "vllm-tier"
        rc = sweep([f"models=[{MODEL}]", "methods=[direct,opticycle]", "benchmarks=[sample]",
                    f"limit_problems={PROBLEMS}", "samples.default=1", f"sampling.max_tokens={MAX_TOKENS}",
                    "method_budgets.opticycle.max_calls=2", "method_budgets.opticycle.max_turns=2",
                    f"sweep.name={name}", f"sweep.output_dir={tmp_path}", f"serving.http_port={port}",
                    "tracking.enabled=false", "cluster.workers=2", "progress.interval_s=10",
                    # the prefix-aware router and its tree actor in front of a real engine (what the
                    # GPU integration test, tests/serving/test_vllm_integration.py, checks on a GPU)
                    "serving.prefix_cache_routing=true"])
    finally:
        proxy.stop()
    assert rc == 0, f"sweep exit {rc}"
    df = _ledger(tmp_path, name)
    assert len(df) == 2 * PROBLEMS and sorted(set(df["method"])) == ["direct", "opticycle"]
    assert df["key"].is_unique and not df["simulated"].any()
    assert (df["status"] != "error").all(), df[["key", "status", "error"]].to_string()
    assert (df["seed"] == 42).all()  # base_seed + sample 0: sent with every call (the YAML keeps seeds working)

    # Token counts: every trajectory call the server answered, as the ledger recorded it.
    calls = [c for cs in df["calls"] for c in json.loads(cs)]
    ledger_usage = collections.Counter((c["prompt_tokens"], c["completion_tokens"], c["cached_prompt_tokens"])
                                       for c in calls)
    traj = [e for e in proxy.chats() if _header(e, "X-Opteval-Harness")]
    server_usage = collections.Counter(_usage(e.response) if e.status == 200 else (None, None, None) for e in traj)
    assert len(traj) == len(calls) and ledger_usage == server_usage, (ledger_usage, server_usage)
    assert all(e.request["seed"] == 42 and e.request["max_tokens"] <= MAX_TOKENS for e in traj)
    assert sum(int(p or 0) for p, _, _ in server_usage.elements()) > 100 * len(traj)  # real prompts, real template
    # enable_prompt_tokens_details took effect: vLLM reports the cached part of every prompt
    assert all("prompt_tokens_details" in e.response["usage"] for e in traj), traj[0].response
    assert df["prompt_tokens"].sum() == sum(int(c["prompt_tokens"] or 0) for c in calls)

    # Readiness: a 1-token answer before the first trajectory's request, and none of those refused.
    chats = proxy.chats()
    first = min(e.t_sent for e in traj)
    probes = [e for e in chats if e.request.get("max_tokens") == 1 and e.t_answered <= first]
    assert any(p.status == 200 and _usage(p.response)[1] == 1 for p in probes), [(p.status, p.response) for p in chats[:3]]
    assert all(e.status == 200 for e in traj), collections.Counter(e.status for e in traj)

    # Teardown: no Serve app of the model, no engine or replica process left.
    wait_for(lambda: not [a for a in serve_apps() if MODEL in a], 60, "the model's Serve app to go")
    wait_for(lambda: not engine_processes(), 60, "the engine processes to exit")


def _read_lines(proc: subprocess.Popen, sink: list[str]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        sink.append(line.rstrip("\n"))


def test_opteval_serve_answers_the_openai_client_keeps_seeds_and_tears_down_on_sigterm(tier_ray, smollm2):
    """``opteval serve`` joining the tier's cluster: the printed URL answers the ``openai`` client;
    the same seed gives the same text and concurrent long seeded prompts all answer (the CPU
    build's crash on seeded chunked prefills is configured away); SIGTERM tears it down."""
    from openai import OpenAI

    address, serve_port = tier_ray
    env = dict(os.environ, PYTHONPATH=str(REPO), RAY_AUTH_MODE="disabled")
    proc = subprocess.Popen([sys.executable, "-m", "opteval.jobs.cli", "serve", f"models=[{MODEL}]",
                             f"cluster.address={address}", f"serving.http_port={serve_port}"],
                            cwd=str(REPO), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    threading.Thread(target=_read_lines, args=(proc, lines), daemon=True).start()
    try:
        wait_for(lambda: any(line.startswith("serving;") for line in lines) or proc.poll() is not None, 600,
                 "opteval serve to print its endpoint")
        assert proc.poll() is None, "\n".join(lines[-40:])
        line = next(x for x in lines if x.startswith(f"{MODEL}: base_url="))
        base_url = line.split("base_url=")[1].split()[0]
        assert "[simulated]" not in line

        client = OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=300)
        r = client.chat.completions.create(model=MODEL, max_tokens=24,
                                           messages=[{"role": "user", "content": "Say hello in one word."}])
        assert r.choices[0].message.content and r.usage is not None
        assert r.usage.completion_tokens >= 1 and r.usage.prompt_tokens > 5  # the chat template's tokens too
        assert {m.id for m in client.models.list().data} == {MODEL}

        prompt = [{"role": "user", "content": "Write a linear program in Python with scipy. " * 8}]
        twice = [client.chat.completions.create(model=MODEL, messages=prompt, max_tokens=32, temperature=0.9,
                                                seed=7).choices[0].message.content for _ in range(2)]
        assert twice[0] == twice[1], twice  # the seed reached the sampler

        async def long_seeded(i: int) -> int:
            body = {"model": MODEL, "max_tokens": 8, "seed": 100 + i, "temperature": 0.6,
                    "messages": [{"role": "user", "content": f"Variable x{i} is bounded. " * 300}]}
            async with httpx.AsyncClient(timeout=600) as c:
                return (await c.post(f"{base_url}/chat/completions", json=body)).status_code

        async def together() -> list[int]:
            return list(await asyncio.gather(*(long_seeded(i) for i in range(4))))

        assert asyncio.run(together()) == [200] * 4  # ~1,500-token prompts x 4 at once, each seeded
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        try:
            rc = proc.wait(timeout=180)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert rc == 0, "\n".join(lines[-40:])
    assert any(x.startswith("tearing down") for x in lines), lines[-10:]
    assert not [a for a in serve_apps() if MODEL in a], serve_apps()
    wait_for(lambda: not engine_processes(), 60, "the engine processes to exit")
    print(f"SIGTERM to exit: {time.monotonic() - t0:.1f} s")


README_LINE = re.compile(r"`(~/\.cache/opteval/vllm-env/bin/opteval sweep [^`]*models=\[smollm2-135m-cpu\][^`]*)`")


def test_the_readmes_real_model_line_runs_word_for_word_on_this_machines_cpus(smollm2, tmp_path):
    """Issue 41: the README's real-model command as written, in a fresh folder, in its own process:
    the sweep starts its own local Ray with this machine's real CPU count (2 here, not the tier's
    6), so the model's bundle, Serve's ingress and an executor must fit what a laptop has."""
    found = README_LINE.findall((REPO / "README.md").read_text(encoding="utf-8"))
    assert len(found) == 1, found
    words = shlex.split(found[0])
    # the environment this tier runs in is the one the line names (.ci/vllm made it there, or
    # OPTEVAL_VLLM_ENV put it elsewhere): its console script, or the same module through this Python
    exe = Path(words[0]).expanduser()
    cmd = [str(exe), *words[1:]] if exe.exists() and Path(sys.executable).parent == exe.parent \
        else [sys.executable, "-m", "opteval.jobs.cli", *words[1:]]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    env.update(PYTHONPATH=str(REPO), RAY_AUTH_MODE="disabled")
    t0 = time.monotonic()
    done = subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=1500)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "Traceback" not in out, out[-4000:]
    name = next(w.split("=", 1)[1] for w in words if w.startswith("sweep.name="))
    df = _ledger(tmp_path / "results", name)
    planned = int(re.search(r"planned (\d+) trajectories", out).group(1))  # type: ignore[union-attr]
    assert df["problem_id"].nunique() == 3 and len(df) == planned and df["key"].is_unique
    assert (df["status"] != "error").all(), df[["key", "status", "error"]].to_string()
    assert not df["simulated"].any()
    print(f"README real-model line: {time.monotonic() - t0:.0f} s on {os.cpu_count()} CPUs")
