"""Reward throughput: the served ``POST /rewards`` against a pool of 2 fresh interpreters.

Run::

    python bench/bench_rewards.py --orlm-executed <ORLM clone>/results/NL4OPT.q2mc_en.ORLM-LLaMA-3-8B/executed.jsonl
    python bench/bench_rewards.py --completions C.jsonl --answers A.jsonl --extraction orlm --grading orlm

Both sides run the same programs (each completion's code as the extraction profile gives
it, ORLM's footer included), in one run on the same machine, so the ratio holds when the
absolute numbers move with the load:

* served: ``jobs/rewards.py serve`` (a subprocess with its own local Ray) with
  ``--executors`` sandbox replicas (default 2, min = max, so both sides get two workers);
  one warm-up request, then ``--repeats`` timed batch requests of all items;
* baseline: a thread pool of 2 running ``python prog.py`` per program (a fresh
  interpreter, the way SIRL's and OR-R1's reward functions run code), the submission read
  with the same extraction profile, graded with the same grading profile.

Prints both times, both correct counts (they must agree), and ``speedup <x>x`` (baseline
time / median served time). The target: >= 5x on ORLM's 245 NL4OPT outputs, with
``correct`` 210 on both sides.

Across nodes (issue 38), a GRPO-shaped load of generated ORLM-style coptpy programs::

    python bench/bench_rewards.py --grpo --nodes 1,2,3            # 256 prompts x 8 completions, 4 steps

For each node count it starts a Ray cluster of that many nodes on this machine
(``tests/fake_nodes.py``: ``ray start`` per node, ``--cpus-per-node`` CPUs and executor
slots each), serves with ``--address`` and ``--executors-per-node``, and times one
``POST /rewards`` per step of ``prompts x completions`` items; the baseline runs the first
``--baseline-items`` of them in fresh interpreters. Prints items/s per node count and
against the baseline. Fake nodes share this machine's cores: on one machine the figure
shows the spread working, not more CPUs.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from opteval.evalcore.extraction import extract_code, extract_submission
from opteval.evalcore.grading import grade
from opteval.evalcore.rewards import RewardItem
from opteval.evalcore.sandbox.types import ERROR, OK, TIMEOUT, ExecResult

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: tests.fake_nodes is the multi-node helper the tests use
    sys.path.insert(0, str(REPO))


def load_items(args: argparse.Namespace) -> list[RewardItem]:
    from opteval.evalcore.models.replay import load_records
    from opteval.jobs.regrade import load_answers
    from opteval.jobs.rewards import orlm_executed_items

    if args.orlm_executed:
        return orlm_executed_items(Path(args.orlm_executed))
    answers = load_answers(Path(args.answers))
    return [RewardItem(r.id, r.completion, answers[r.id]) for r in load_records(Path(args.completions))]


# -- baseline: fresh interpreters -------------------------------------------------------------


def fresh_run(code: str, workdir: Path, index: int, wall_s: float) -> ExecResult:
    prog = workdir / f"prog{index}.py"
    prog.write_text(code, encoding="utf-8")
    start = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, prog.name], cwd=workdir, capture_output=True, text=True, timeout=wall_s)
    except subprocess.TimeoutExpired:
        return ExecResult(outcome=TIMEOUT, wall_s=time.perf_counter() - start)
    return ExecResult(outcome=OK if p.returncode == 0 else ERROR, stdout=p.stdout, stderr=p.stderr,
                      exit_code=p.returncode, wall_s=time.perf_counter() - start)


def baseline(items: list[RewardItem], extraction: str, grading: str, workers: int, wall_s: float) -> tuple[float, int]:
    codes = [extract_code(it.completion, extraction) for it in items]
    with tempfile.TemporaryDirectory(prefix="rewards-bench-") as tmp:
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(
                lambda ic: None if ic[1] is None else fresh_run(ic[1], Path(tmp), ic[0], wall_s), enumerate(codes)))
        elapsed = time.perf_counter() - start
    correct = sum(1 for it, r in zip(items, results)
                  if r is not None and grade(extract_submission(r, extraction), it.answer, grading))
    return elapsed, correct


# -- served -----------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url: str, body: dict, timeout_s: float = 900.0) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return json.loads(resp.read())


def start_service(executors: int, log: Path, *flags: str) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    env = dict(os.environ, RAY_AUTH_MODE="disabled", PYTHONPATH=str(REPO))
    env.pop("RAY_ADDRESS", None)  # a local Ray of its own, unless flags give --address
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "jobs" / "rewards.py"), "serve", "--port", str(port),
         "--min-executors", str(executors), "--max-executors", str(executors), *flags],
        cwd=REPO, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/rewards"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"serve exited {proc.returncode}; see {log}")
        try:
            urllib.request.urlopen(url, timeout=5).read()
            return proc, url
        except OSError:
            time.sleep(1)
    proc.terminate()
    raise SystemExit(f"service not ready after 600 s; see {log}")


def stop_service(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def served(url: str, items: list[RewardItem], extraction: str, grading: str, repeats: int) -> tuple[list[float], int]:
    body = {"scheme": "correct", "extraction": extraction, "grading": grading,
            "items": [{"id": it.id, "completion": it.completion, "answer": it.answer} for it in items]}
    _post(url, {**body, "items": body["items"][:8]})  # warm-up: replicas up, fork servers started
    times, correct = [], -1
    for _ in range(repeats):
        start = time.perf_counter()
        rewards = _post(url, body)["rewards"]
        times.append(time.perf_counter() - start)
        correct = sum(1 for r in rewards if r["correct"])
    return times, correct


# -- a GRPO-shaped load across nodes -----------------------------------------------------------

GRPO_PROGRAM = """## Mathematical Model:
maximize {objective} subject to {count} resource limits

```python
import coptpy as cp
from coptpy import COPT
env = cp.Envr()
model = env.createModel("plan")
x = [model.addVar(lb=0, name=f"x{{i}}") for i in range({n})]
{constraints}
model.setObjective({objective_code}, COPT.MAXIMIZE)
model.solve()
```
"""


def grpo_items(prompts: int, per_prompt: int, seed: int = 0) -> list[RewardItem]:
    """``prompts`` random LPs (3-8 variables, 2-6 constraints; keys from HiGHS), each with
    ``per_prompt`` completions: six in eight right, one with a wrong objective, one with no code."""
    import random

    from scipy.optimize import linprog

    rng = random.Random(seed)
    items: list[RewardItem] = []
    for p in range(prompts):
        n, m = rng.randint(3, 8), rng.randint(2, 6)
        c = [rng.randint(1, 9) for _ in range(n)]
        rows = [[rng.randint(1, 6) for _ in range(n)] for _ in range(m)]
        rhs = [rng.randint(20, 90) for _ in range(m)]
        key = round(-linprog([-v for v in c], A_ub=rows, b_ub=rhs, method="highs").fun, 6)
        cons = "\n".join(f"model.addConstr({' + '.join(f'{a} * x[{i}]' for i, a in enumerate(row))} <= {b})"
                         for row, b in zip(rows, rhs))
        for k in range(per_prompt):
            coef = list(c)
            if k % 8 == 6:
                coef[0] += 3  # a wrong model of the same problem
            text = GRPO_PROGRAM.format(objective=" + ".join(f"{v}x{i}" for i, v in enumerate(c)), count=m, n=n,
                                       constraints=cons,
                                       objective_code=" + ".join(f"{v} * x[{i}]" for i, v in enumerate(coef)))
            if k % 8 == 7:
                text = "## Mathematical Model:\nI could not write the program."
            items.append(RewardItem(f"q{p}", text, key))
    return items


def grpo(args: argparse.Namespace) -> int:
    from opteval.cluster.runtime import EXECUTOR_RESOURCE
    from tests.fake_nodes import Node, fake_cluster

    items = grpo_items(args.prompts, args.per_prompt)
    print(f"GRPO-shaped load: {args.prompts} prompts x {args.per_prompt} completions = {len(items)} items a step, "
          f"{args.steps} steps; {args.cpus_per_node} CPUs and executors per fake node", flush=True)
    body = {"scheme": "correct", "extraction": "orlm", "grading": "orlm",
            "items": [{"id": it.id, "completion": it.completion, "answer": it.answer} for it in items]}
    rates: dict[int, float] = {}
    correct_served = -1
    for count in [int(v) for v in args.nodes.split(",")]:
        node = Node(cpus=args.cpus_per_node, resources={EXECUTOR_RESOURCE: args.cpus_per_node})
        executors = count * args.cpus_per_node
        with fake_cluster([node] * count, prefix="brw-") as cluster, \
                tempfile.TemporaryDirectory(prefix="rewards-bench-log-") as tmp:
            proc, url = start_service(executors, Path(tmp) / "serve.log", "--address", cluster.address,
                                      "--executors-per-node", str(args.cpus_per_node))
            try:
                _post(url, {**body, "items": body["items"][: executors * 4]})  # warm-up: every replica up
                times = []
                for _ in range(args.steps):
                    start = time.perf_counter()
                    rewards = _post(url, body)["rewards"]
                    times.append(time.perf_counter() - start)
                    correct_served = sum(1 for r in rewards if r["correct"])
                    errors = sum(1 for r in rewards if r.get("error"))
                    if errors:
                        print(f"  {errors} items came back as errors", flush=True)
            finally:
                stop_service(proc)
        rates[count] = len(items) / statistics.median(times)
        print(f"{count} node(s), {executors} executors: steps {' '.join(f'{t:.1f}' for t in times)} s, "
              f"{rates[count]:.1f} items/s, correct {correct_served}/{len(items)}", flush=True)
    sample = items[: args.baseline_items]
    base_s, base_correct = baseline(sample, "orlm", "orlm", args.fresh_workers, args.wall_s)
    base_rate = len(sample) / base_s
    print(f"fresh interpreters (pool of {args.fresh_workers}): {len(sample)} items in {base_s:.1f} s, "
          f"{base_rate:.2f} items/s, correct {base_correct}/{len(sample)}")
    first = min(rates)
    for count, rate in rates.items():
        print(f"nodes {count}: {rate:.1f} items/s, {rate / base_rate:.1f}x fresh interpreters, "
              f"{rate / rates[first]:.2f}x {first} node(s)")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--orlm-executed", default=os.environ.get("OPTEVAL_ORLM_OUTPUTS"),
                    help="ORLM's executed.jsonl (default $OPTEVAL_ORLM_OUTPUTS)")
    ap.add_argument("--completions")
    ap.add_argument("--answers")
    ap.add_argument("--extraction", default="orlm")
    ap.add_argument("--grading", default="orlm")
    ap.add_argument("--executors", type=int, default=2)
    ap.add_argument("--fresh-workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--wall-s", type=float, default=60.0)
    ap.add_argument("--grpo", action="store_true", help="a generated GRPO-shaped load on fake nodes (see above)")
    ap.add_argument("--nodes", default="1,2,3", help="--grpo: node counts to time, comma-separated")
    ap.add_argument("--cpus-per-node", type=int, default=2, help="--grpo: CPUs and executors of each fake node")
    ap.add_argument("--prompts", type=int, default=256)
    ap.add_argument("--per-prompt", type=int, default=8, help="completions per prompt")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--baseline-items", type=int, default=256)
    args = ap.parse_args(argv)
    if args.grpo:
        return grpo(args)
    if not args.orlm_executed and not (args.completions and args.answers):
        ap.error("give --orlm-executed (or $OPTEVAL_ORLM_OUTPUTS) or --completions and --answers")
    items = load_items(args)
    print(f"{len(items)} completions, extraction {args.extraction}, grading {args.grading}", flush=True)
    with tempfile.TemporaryDirectory(prefix="rewards-bench-log-") as tmp:
        proc, url = start_service(args.executors, Path(tmp) / "serve.log")
        try:
            times, served_correct = served(url, items, args.extraction, args.grading, args.repeats)
        finally:
            stop_service(proc)
    served_s = statistics.median(times)
    print(f"served ({args.executors} executors): {' '.join(f'{t:.2f}' for t in times)} s, "
          f"median {served_s:.2f} s, correct {served_correct}/{len(items)}", flush=True)
    base_s, base_correct = baseline(items, args.extraction, args.grading, args.fresh_workers, args.wall_s)
    print(f"fresh interpreters (pool of {args.fresh_workers}): {base_s:.2f} s, correct {base_correct}/{len(items)}")
    print(f"speedup {base_s / served_s:.1f}x")
    return 0 if served_correct == base_correct else 1


if __name__ == "__main__":
    sys.exit(main())
