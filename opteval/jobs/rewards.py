"""Verifiable rewards for RL trainers: score a file of rollouts, or serve ``POST /rewards``.

    python jobs/rewards.py score --completions C.jsonl --answers A.jsonl --scheme S \\
        [--extraction E] [--grading G] --out R.jsonl [--executors N] [--wall-s S]
    python jobs/rewards.py serve [--port P] [--host H [--token-env NAME]] [--min-executors N] [--max-executors M]

Both use ``opteval.evalcore.rewards`` (schemes ``correct``, ``sirl``, ``sirl-stage1``, ``orr1``, and the
released-code ``sirl-released``/``orr1-released`` of ``opteval.evalcore.rewards_released``) and
run the programs in the sandbox on Ray (a local Ray started here unless ``RAY_ADDRESS``
names a cluster). Only the extracted code reaches a sandbox; answers stay in this process
(``score``) or in the service's ingress (``serve``).

``score``: the file formats of ``jobs/regrade.py`` (its readers are reused): ``C`` rows
``{"id", "completion", "sample"?}`` (JSONL or Parquet), ``A`` rows ``{"id", "answer"}``.
Programs run on executor actors (``opteval.cluster.actors.executors``). ``R.jsonl`` gets one row per
completion, in input order: ``{"id", "sample", "reward", "correct", "parts"}``; stdout
gets ``scored <n> completions: mean reward <r>, correct <c>/<n>``.

``serve``: the app of ``opteval.cluster.serve.rewards_app`` on ``http://<host>:<port>/rewards``
(loopback by default), until SIGINT/SIGTERM. A ``--host`` other than loopback needs
``--token-env NAME``: the environment variable ``NAME`` holds a token every request must send
as ``Authorization: Bearer <token>`` (it refuses to start without one).

Exit codes: 0 done, 2 bad input (one line naming the file and line, the ids, or the flag),
5 Ray or Serve did not start (start-up timed out on every attempt; one line naming the cause),
130 interrupted.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import difflib
import json
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opteval.evalcore.extraction import PROFILES as EXTRACTION_PROFILES
from opteval.evalcore.extraction import extract_code, missing_packages
from opteval.evalcore.grading import PROFILES as GRADING_PROFILES
from opteval.evalcore.models.replay import ReplayFileError, ReplayRecord, jsonl_rows, load_records
from opteval.evalcore.rewards import SCHEMES, Reward, RewardItem, get_scheme, score
from opteval.evalcore.rewards_released import extraction_for
from opteval.evalcore.sandbox.types import ExecResult, Limits
from opteval.exit_codes import ExitCode
from opteval.jobs.regrade import RegradeInputError, load_answers

if TYPE_CHECKING:  # the app module imports Ray and Serve: only the serve command loads it
    from opteval.cluster.serve.rewards_app import ServiceConfig

EXIT_INPUT = ExitCode.USAGE
EXIT_STARTUP = ExitCode.STARTUP  # Ray or Serve did not start (jobs/sweep.py uses the same code)
EXIT_INTERRUPTED = ExitCode.INTERRUPTED
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
DEFAULT_PORT = 8790
ORLM_OUTPUTS_ENV = "OPTEVAL_ORLM_OUTPUTS"
ORLM_OUTPUTS_HOWTO = (
    "ORLM's released NL4OPT outputs are not shipped with opteval (third-party data): "
    "git clone https://github.com/Cardinal-Operations/ORLM and set "
    f"${ORLM_OUTPUTS_ENV}=<clone>/results/NL4OPT.q2mc_en.ORLM-LLaMA-3-8B/executed.jsonl"
)


class RewardsInputError(ValueError):
    """Bad input for ``score``/``serve``: the message names the file and line, ids or flag."""


# -- score -----------------------------------------------------------------------------------


def _scheme(name: str) -> str:
    """``--scheme``: a registered scheme, else argparse's one error line with a did-you-mean."""
    if name in SCHEMES:
        return name
    close = difflib.get_close_matches(name, list(SCHEMES), n=1)
    raise argparse.ArgumentTypeError(f"unknown scheme {name!r} (known: {', '.join(sorted(SCHEMES))})"
                                     + (f"; did you mean {close[0]!r}?" if close else ""))


def items_for(records: list[ReplayRecord], answers: dict[str, Any], scheme: str) -> list[RewardItem]:
    """Pair completions with answers; a scheme that needs answers rejects ids without one."""
    if get_scheme(scheme).needs_answer:
        missing = sorted({r.id for r in records if r.id not in answers})
        if missing:
            shown = ", ".join(repr(m) for m in missing[:20]) + (" ..." if len(missing) > 20 else "")
            raise RewardsInputError(f"{len(missing)} completion id(s) have no answer: {shown}")
    return [RewardItem(r.id, r.completion, answers.get(r.id)) for r in records]


def orlm_executed_items(path: Path) -> list[RewardItem]:
    """ORLM's released ``results/<bench>.q2mc_en.ORLM-LLaMA-3-8B/executed.jsonl`` as items:
    id = ``source``, completion = ``en_math_model_coptpy_code`` (the model's response),
    answer = ``en_answer``. Errors name the file and line."""
    if not path.exists():
        raise RewardsInputError(f"{path}: no such file ({ORLM_OUTPUTS_HOWTO})")
    out = []
    for where, row in jsonl_rows(path, RewardsInputError):
        if not isinstance(row, dict) or not {"source", "en_math_model_coptpy_code", "en_answer"} <= set(row):
            raise RewardsInputError(f"{where}: expected ORLM's keys source, en_math_model_coptpy_code, en_answer")
        out.append(RewardItem(str(row["source"]), str(row["en_math_model_coptpy_code"]), row["en_answer"]))
    return out


async def _run_on_executors(codes: list[str | None], executors: int, limits: Limits) -> list[ExecResult | None]:
    # deferred: the executor actors import Ray; only `score` runs them
    from opteval.cluster.actors.executors import RayExecutor, _Shared, start_executors

    handles = start_executors(f"rewards-{os.getpid()}", executors, 1, limits)
    facade = RayExecutor(_Shared(handles), limits)

    async def one(code: str | None) -> ExecResult | None:
        return None if code is None else await facade.run(code, limits)

    return list(await asyncio.gather(*(one(c) for c in codes)))


def run_programs(codes: list[str | None], executors: int | None, limits: Limits) -> list[ExecResult | None]:
    """Run every program on executor actors of a Ray this function joins or starts (and stops)."""
    # deferred: only `score` joins or starts Ray
    from opteval.cluster.runtime import available_cpus, connect, disconnect

    rt = connect(None)
    try:
        n = executors or available_cpus()
        return asyncio.run(_run_on_executors(codes, n, limits))
    finally:
        disconnect(rt)


def write_rewards(path: Path, records: list[ReplayRecord], rewards: list[Reward]) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for rec, r in zip(records, rewards):
            fh.write(json.dumps({**r.to_json(rec.id), "sample": rec.sample}) + "\n")


def cmd_score(args: argparse.Namespace) -> int:
    try:
        records = load_records(args.completions)
        if not records:
            raise RewardsInputError(f"{args.completions}: no completions")
        answers = load_answers(args.answers)
        items = items_for(records, answers, args.scheme)
        try:
            args.extraction = extraction_for(args.scheme, args.extraction)
        except ValueError as exc:
            raise RewardsInputError(str(exc)) from None
        if args.out.parent and not args.out.parent.is_dir():
            raise RewardsInputError(f"--out {args.out}: directory {args.out.parent} does not exist")
        missing = missing_packages(args.extraction)
        if missing:
            raise RewardsInputError(missing)
    except (RewardsInputError, RegradeInputError, ReplayFileError) as exc:
        print(f"rewards: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    limits = Limits(wall_s=args.wall_s, cpu_s=args.wall_s) if args.wall_s else Limits()
    codes = [extract_code(it.completion, args.extraction) for it in items]
    results = run_programs(codes, args.executors, limits)
    rewards = score(args.scheme, items, results, args.extraction, args.grading)
    write_rewards(args.out, records, rewards)
    n = len(rewards)
    correct = sum(1 for r in rewards if r.correct)
    mean = sum(r.reward for r in rewards) / n
    print(f"scored {n} completions: mean reward {mean:.4f}, correct {correct}/{n}")
    return 0


# -- serve -----------------------------------------------------------------------------------


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def service_token(host: str, token_env: str | None) -> str | None:
    """The bearer token the service checks: required off loopback, read from ``$token_env``."""
    if token_env is None:
        if host not in LOOPBACK_HOSTS:
            raise RewardsInputError(f"--host {host} exposes the service beyond this machine: give --token-env NAME "
                                    "(an environment variable holding the bearer token clients must send)")
        return None
    token = os.environ.get(token_env, "").strip()
    if not token:
        raise RewardsInputError(f"--token-env {token_env}: the environment variable {token_env} is unset or empty")
    return token


def placed(cfg: ServiceConfig) -> ServiceConfig:
    """``cfg`` fitted to the cluster joined: executors take an executor slot where some node
    offers them (a local Ray always does), and more executors than the nodes can hold at once
    are refused now, not left pending in Serve while the trainer waits."""
    # deferred: only `serve` fits executors to the cluster
    from opteval.cluster.runtime import EXECUTOR_RESOURCE, describe_nodes, node_resources

    nodes = node_resources()
    cfg = dataclasses.replace(cfg, executor_resource=any(float(n.get(EXECUTOR_RESOURCE, 0)) > 0 for n in nodes))
    fits = cfg.capacity(nodes)
    start = max(cfg.min_executors, cfg.initial_executors or 0)
    if start > fits:
        per_node = "" if cfg.executors_per_node is None else f" and --executors-per-node {cfg.executors_per_node}"
        raise RewardsInputError(f"--min-executors/--initial-executors {start}: the cluster holds {fits} executor(s) "
                                f"at {cfg.executor_cpus:g} CPU each{per_node} ({describe_nodes(nodes)})")
    if cfg.max_executors > fits:
        print(f"rewards: note: --max-executors {cfg.max_executors}, but the cluster holds {fits} now: the autoscaler "
              f"places more when nodes join", file=sys.stderr, flush=True)
    return cfg


def cmd_serve(args: argparse.Namespace) -> int:
    # deferred: rewards_app imports Ray and Starlette; `serve` only
    from opteval.cluster.serve.rewards_app import ServiceConfig

    try:
        cfg = ServiceConfig(min_executors=args.min_executors, max_executors=args.max_executors,
                            initial_executors=args.initial_executors, slots=args.slots, wall_s=args.wall_s,
                            executors_per_node=args.executors_per_node)
        token = service_token(args.host, args.token_env)
    except ValueError as exc:
        print(f"rewards: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    if not _port_free(args.host, args.port):
        print(f"rewards: error: --port {args.port}: {args.host}:{args.port} is already in use", file=sys.stderr)
        return EXIT_INPUT
    # deferred: Ray and the Serve app load after the input checks
    from opteval.cluster.runtime import connect, disconnect
    from opteval.cluster.serve import rewards_app

    rt = connect(args.address, num_cpus=args.num_cpus)
    try:
        cfg = placed(cfg)
    except RewardsInputError as exc:
        disconnect(rt)
        print(f"rewards: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    stop = threading.Event()
    got: list[int] = []

    def _stop(signum: int, _frame: object) -> None:
        got.append(signum)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):  # after ray.init, which installs its own
        signal.signal(sig, _stop)
    try:
        url = rewards_app.deploy(cfg, args.port, args.host, token)
        print(f"rewards: serving POST {url} (executors {cfg.min_executors}..{cfg.max_executors}"
              f"{'' if cfg.executors_per_node is None else f', at most {cfg.executors_per_node} a node'}, "
              f"{cfg.slots} slots each{'; bearer token from $' + args.token_env if token else ''}); Ctrl-C stops",
              flush=True)
        while not stop.wait(1.0):
            pass
    finally:
        if not rt.started_local:  # a joined cluster outlives us: take our app off it, leave its other apps
            rewards_app.undeploy()
        disconnect(rt)
    # The only way out of the loop is a signal: a stopped service is "interrupted" (docs/errors.md)
    print(f"rewards: stopped (signal {got[0] if got else '?'})", file=sys.stderr, flush=True)
    return EXIT_INTERRUPTED


# -- CLI -------------------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    sc = sub.add_parser("score", help="score a file of completions on executor actors")
    sc.add_argument("--completions", required=True, type=Path)
    sc.add_argument("--answers", required=True, type=Path)
    sc.add_argument("--scheme", required=True, type=_scheme, metavar="{" + ",".join(sorted(SCHEMES)) + "}")
    sc.add_argument("--extraction", default=None, choices=sorted(EXTRACTION_PROFILES),
                    help="default: submit, or a released scheme's own profile (sirl-train, orr1-train)")
    sc.add_argument("--grading", default="optagentbench", choices=sorted(GRADING_PROFILES))
    sc.add_argument("--out", required=True, type=Path)
    sc.add_argument("--executors", type=_positive_int, default=None, help="executor actors (default: Ray's CPUs)")
    sc.add_argument("--wall-s", type=float, default=None, help="per-program wall/CPU limit (Limits default if unset)")

    sv = sub.add_parser("serve", help="serve POST /rewards on Ray Serve")
    sv.add_argument("--port", type=int, default=DEFAULT_PORT)
    sv.add_argument("--host", default="127.0.0.1", help="bind address (default loopback only; any other needs --token-env)")
    sv.add_argument("--token-env", default=None, metavar="NAME",
                    help="environment variable holding the bearer token every request must send")
    sv.add_argument("--min-executors", type=_positive_int, default=1)
    sv.add_argument("--max-executors", type=_positive_int, default=max(1, os.cpu_count() or 1))
    sv.add_argument("--initial-executors", type=_positive_int, default=None)
    sv.add_argument("--slots", type=_positive_int, default=2, help="programs at once per executor")
    sv.add_argument("--wall-s", type=float, default=60.0, help="per-program wall/CPU limit")
    sv.add_argument("--num-cpus", type=_positive_int, default=None, help="CPUs of the local Ray (default: all)")
    sv.add_argument("--address", default=None,
                    help="join this Ray cluster (default: $RAY_ADDRESS, else a local Ray of its own)")
    sv.add_argument("--executors-per-node", type=_positive_int, default=None,
                    help="at most this many executors on one node, so they spread over the nodes")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    # deferred: importing this job stays light (no opteval.cluster module)
    from opteval.cluster.runtime import RayStartupError

    args = parse_args(argv)
    try:
        return cmd_score(args) if args.command == "score" else cmd_serve(args)
    except RayStartupError as exc:
        print(f"rewards: startup error: {' '.join(str(exc).split())}", file=sys.stderr, flush=True)
        return EXIT_STARTUP
    except KeyboardInterrupt:
        print("rewards: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    except SystemExit as exc:  # Ray's own SIGTERM handler (sys.exit(15)), e.g. inside ray.init
        if exc.code != signal.SIGTERM:
            raise
        print("rewards: interrupted (signal 15)", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
