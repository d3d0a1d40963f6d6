"""Run (or resume) a sweep: ``python jobs/sweep.py [config.yaml] [key=value ...]``.

With no arguments: the embedded demo (a local Ray started here, the simulated policy on
Ray Serve, the sample benchmark, the three harnesses, ``samples.default`` per problem).
On a cluster: ``ray job submit --working-dir . -- python jobs/sweep.py ...`` (the
address comes from ``RAY_ADDRESS``). Re-running with the same ``sweep.name`` resumes.
``plan_only=true`` prints ``planned <N> trajectories`` and exits without importing Ray.

Exit codes: 0 done, 2 bad configuration (the message names the key), a damaged ledger
file (named; ``sweep.repair=true`` quarantines it and re-runs its keys) or a sweep whose
writer lease another driver holds (``sweep.wait_for_lease=true`` waits), 3 a commit
failed (disk full, permission, object store: the message names the path and cause; what
was committed before stays valid and the same command resumes once it is fixed),
130 interrupted (SIGINT/SIGTERM; what finished is committed and the same command resumes).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

EXIT_CONFIG = 2
EXIT_COMMIT = 3


def main(argv: list[str] | None = None) -> int:
    from cluster.config import ConfigError, load_config
    from cluster.ledger import CommitError, ConfigChangedError, LedgerError

    argv = list(sys.argv[1:] if argv is None else argv)
    if {"-h", "--help"} & set(argv):
        print(__doc__.strip())
        print("\nEvery key, its default and its meaning: configs/sweep.yaml")
        return 0
    try:
        cfg = load_config(argv)
        check_job_storage(cfg)
        if bool(cfg.plan_only):
            return plan_only(cfg)
        from cluster.scheduler import run_sweep

        return run_sweep(cfg)
    except (ConfigError, ConfigChangedError) as exc:
        print(f"config error: {exc}", file=sys.stderr, flush=True)
        return EXIT_CONFIG
    except CommitError as exc:
        print(f"commit failed: {exc}. What was committed before stays valid; fix the cause and re-run "
              "the same command to resume.", file=sys.stderr, flush=True)
        return EXIT_COMMIT
    except LedgerError as exc:
        print(f"ledger error: {exc}", file=sys.stderr, flush=True)
        return EXIT_CONFIG


def check_job_storage(cfg) -> None:
    """Under ``ray job submit`` the working directory is a temporary unpacked package whose
    path changes with every upload: a relative ledger there would be lost on resume."""
    from cluster.config import ConfigError

    if not os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR"):
        return
    out = str(cfg.sweep.output_dir)
    if "://" not in out and not os.path.isabs(out):
        raise ConfigError(
            f"sweep.output_dir={out} is relative; under ray job submit it resolves inside the job's "
            f"temporary working_dir ({os.getcwd()}) and a resumed job would not see it: use shared "
            "storage (s3://bucket/prefix) or an absolute path on a shared volume")
    if "://" in out and not out.startswith("file://") and not (cfg.tracking.uri or os.environ.get("MLFLOW_TRACKING_URI")):
        print("warning: no tracking.uri / MLFLOW_TRACKING_URI: MLflow would write a SQLite file into the job's "
              "temporary working_dir; the ledger stays the truth (report.py --sync-mlflow re-logs later)",
              file=sys.stderr, flush=True)


def plan_only(cfg) -> int:
    """Expand the plan and consult the ledger; never imports Ray."""
    from cluster.scheduler import plan_report, prepare

    prep = prepare(cfg, read_only=True)
    print(plan_report(prep), flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    sys.exit(main())
