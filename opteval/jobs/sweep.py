"""Run (or resume) a sweep: ``python jobs/sweep.py [config.yaml] [key=value ...]`` (or ``opteval sweep``).

With no arguments: the embedded demo (a local Ray started here, the simulated policy on
Ray Serve, the sample benchmark, the three harnesses, ``samples.default`` per problem).
On a cluster: ``ray job submit --working-dir . -- python jobs/sweep.py ...`` (the
address comes from ``RAY_ADDRESS``). Re-running with the same ``sweep.name`` resumes.
``plan_only=true`` prints ``planned <N> trajectories`` and exits without importing Ray.

Absent benchmark files are fetched first (``data.fetch_missing``, default true; from
``data.base_url`` or the pinned upstream, sha256-checked); ``plan_only`` never downloads.

Exit codes: 0 done; 2 bad input (one line naming the key or file), a damaged ledger
file (named; ``sweep.repair=true`` quarantines it and re-runs its keys) or a sweep whose
writer lease another driver holds (``sweep.wait_for_lease=true`` waits), 3 a commit
failed (disk full, permission, object store: the message names the path and cause; what
was committed before stays valid and the same command resumes once it is fixed);
4 the sweep finished with ``status=error`` rows (how many and the top reasons are printed;
``sweep.retry_errors=true`` reruns them, ``sweep.allow_errors=true`` exits 0); a served model whose
server refuses the sweep's request shape (preflight) or answers every call with the same HTTP 400
(``sweep.reject_streak``) exits 2 naming the model and the server's text, and so does a vLLM model
whose deploy failed (its engine's own error, from Serve or the replica's log; its app is torn down);
5 Ray did not start (its start-up timed out on every attempt, e.g. a heavily loaded machine:
one line naming the cause; nothing was dispatched, the same command starts it later);
130 interrupted (SIGINT/SIGTERM, honoured from the first second; what finished is committed and the same command
resumes). Every code and its line: docs/errors.md.
"""
from __future__ import annotations

import importlib.util
import os
import re
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from opteval.exit_codes import ExitCode
from opteval.jobs.args import JobParser, job_parser, parse

if TYPE_CHECKING:
    from opteval.sweepcore.config import SweepConfig

EXIT_CONFIG = ExitCode.USAGE
EXIT_INTERRUPTED = ExitCode.INTERRUPTED
EXIT_COMMIT = ExitCode.COMMIT
EXIT_STARTUP = ExitCode.STARTUP  # Ray did not start (its start-up timed out on every attempt): retry later; also
# cluster/driver/run.py's EXIT_CLUSTER_LOST: the local cluster it started stopped under the sweep
EXIT_ENDPOINT = ExitCode.ENDPOINT  # a served model's endpoint gave no proper answer to the preflight (down or flaky)

FORMS = """\
usage: python jobs/sweep.py [CONFIG.yaml] [key=value ...]     (the same: opteval sweep ...)

Arguments, in this order:
  CONFIG.yaml  optional, first: a YAML merged over configs/sweep.yaml (a path, or relative to
               the checkout, e.g. configs/sweeps/paper.yaml)
  key=value    then any number of OmegaConf dotlist overrides, applied last: dotted keys
               (samples.default=4), lists in brackets (models=[sim-small,Qwen3-4B]), null for None.
               An unknown key or a bad value exits 2 with one line naming the key."""


def usage() -> str:
    """``--help``: what the run does, the argument forms, and the config's top-level sections
    read from configs/sweep.yaml itself (so the list cannot go stale)."""
    # deferred: --help only; sweepcore.config loads omegaconf and pyarrow
    from opteval.sweepcore.config import configs_dir

    path = configs_dir() / "sweep.yaml"
    sections = "\n".join(config_sections(path))
    return "\n\n".join([__doc__.strip(), FORMS, f"Top-level sections ({path}: every key, its default and meaning):\n{sections}"])


def config_sections(path: Path) -> list[str]:
    """One line per top-level key of a sweep YAML: a section's keys, or a value's default and comment."""
    # deferred: PyYAML loads only for --help's section list
    import yaml

    text = path.read_text(encoding="utf-8")
    data = yaml.safe_load(text) or {}
    comments: dict[str, str] = {}
    commented = None  # the top-level key whose comment may continue on the next lines
    for line in text.splitlines():
        top = re.match(r"([A-Za-z_]\w*):[^#]*(?:#(.*))?$", line)
        more = re.match(r"\s+#(.*)$", line)
        if top:
            commented = top.group(1) if top.group(2) else None
            if commented:
                comments[commented] = top.group(2).strip()
        elif more and commented:
            comments[commented] += " " + more.group(1).strip()
        else:
            commented = None
    width = max((len(k) for k in data), default=0)
    lines = []
    for key, value in data.items():
        if isinstance(value, dict) and value:
            body = "keys: " + ", ".join(map(str, value))
        else:
            body = f"default {yaml.safe_dump(value, default_flow_style=True).strip().removesuffix('...').strip()}"
            if comments.get(key):
                body += f"; {comments[key]}"
        lines += textwrap.wrap(body, 100, initial_indent=f"  {key:<{width}}  ", subsequent_indent=" " * (width + 4))
    return lines


def build_parser() -> JobParser:
    """``opteval sweep``'s line: ``--help`` (``usage()``, read when asked), then the optional YAML and
    the overrides, every word as given (load_config names a stray ``--x``: it has no option)."""
    return job_parser("sweep", usage, unknown=None)


def main(argv: list[str] | None = None) -> int:
    # deferred: main() installs it first; importing the job loads nothing
    from opteval.cluster.driver import signals

    old = signals.install()  # from the first second: Ctrl-C / SIGTERM stop the run (exit 130)
    try:
        return _main(argv)
    except signals.Interrupted as exc:
        print(f"[sweep] interrupted during startup (signal {exc.signum}); nothing was started", flush=True)
        return EXIT_INTERRUPTED
    finally:
        signals.restore(old)
        signals.reset()


def _main(argv: list[str] | None) -> int:
    # deferred: loads after main() installs signals (Ctrl-C -> exit 130)
    from opteval.cluster.driver import signals
    from opteval.cluster.driver.preflight import EndpointUnanswered
    from opteval.cluster.runtime import RayStartupError
    from opteval.cluster.serve.serve_apps import ModelNotReady
    from opteval.evalcore.problems import BenchmarkLoadError
    from opteval.sweepcore.config import ConfigError, load_config, overridden
    from opteval.sweepcore.ledger import CommitError, ConfigChangedError, LedgerError

    args = parse(build_parser(), list(sys.argv[1:] if argv is None else argv))
    if args is None:  # --help
        return 0
    try:
        signals.step("reading the config")
        cfg = load_config(args.overrides)
        check_job_storage(cfg)
        if cfg.plan_only:
            return plan_only(cfg)
        for line in overridden(cfg):  # the precedence rule's decisions, once
            print(line, flush=True)
        check_output_dir(cfg)
        check_serving(cfg)
        signals.step("checking the benchmark files")
        ensure_data(cfg)
        signals.checkpoint()
        # deferred: the driver loads only for a real run, not plan_only
        from opteval.cluster.driver import run_sweep

        return run_sweep(cfg)
    except ConfigError as exc:
        print(f"config error: {_one_line(exc)}", file=sys.stderr, flush=True)
        return EXIT_CONFIG
    except ConfigChangedError as exc:
        print(f"config error: {exc}", file=sys.stderr, flush=True)
        return EXIT_CONFIG
    except BenchmarkLoadError as exc:  # present but not the pinned file, or malformed
        print(f"config error: data: {_one_line(exc)}", file=sys.stderr, flush=True)
        return EXIT_CONFIG
    except CommitError as exc:
        print(f"commit failed: {exc}. What was committed before stays valid; fix the cause and re-run "
              "the same command to resume.", file=sys.stderr, flush=True)
        return EXIT_COMMIT
    except LedgerError as exc:
        print(f"ledger error: {exc}", file=sys.stderr, flush=True)
        return EXIT_CONFIG
    except RayStartupError as exc:
        print(f"startup error: {_one_line(exc)}", file=sys.stderr, flush=True)
        return EXIT_STARTUP
    except ModelNotReady as exc:  # a deploy failed or timed out; its apps are torn down already
        print(f"model error: {_one_line(exc)}", file=sys.stderr, flush=True)
        return EXIT_CONFIG
    except EndpointUnanswered as exc:  # transient or down, not bad input: rerun when it answers
        print(f"endpoint error: {_one_line(exc)}", file=sys.stderr, flush=True)
        return EXIT_ENDPOINT


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def check_output_dir(cfg: SweepConfig) -> None:
    """A local ``sweep.output_dir`` must be creatable and writable before anything starts
    (else the first commit, minutes in, would fail with a traceback)."""
    # deferred: loads after main() installs signals (Ctrl-C -> exit 130)
    from opteval.sweepcore.config import ConfigError

    out = cfg.sweep.output_dir
    if "://" in out and not out.startswith("file://"):
        return  # object stores: the ledger's own open reports access errors
    path = Path(out[len("file://"):] if out.startswith("file://") else out).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".opteval-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"sweep.output_dir: cannot write to {path} ({exc.strerror or exc})") from None


def check_serving(cfg: SweepConfig) -> None:
    """Before Ray starts: a ``backend: vllm`` model where vLLM is not installed, and a Serve port
    another process holds (Serve's proxy would fail minutes later, in a traceback). Only for a
    cluster this sweep starts: a joined one may run Serve on that port already."""
    # deferred: serving imports Ray; plan_only never gets here
    from opteval.cluster.runtime import ray_initialized, resolve_address
    from opteval.cluster.serve.serving import port_free
    from opteval.sweepcore.backends import backend_of
    from opteval.sweepcore.config import ConfigError, model_config
    from opteval.sweepcore.vllm_env import install_hint

    backends = {str(n): backend_of(model_config(str(n)), cfg.serving) for n in cfg.models}
    vllm = [n for n, b in backends.items() if b.name == "vllm"]
    if vllm and importlib.util.find_spec("vllm") is None:
        raise ConfigError(f"models: {', '.join(vllm)} {'needs' if len(vllm) == 1 else 'need'} vLLM (backend: vllm), "
                          f"which this environment "
                          f"({sys.prefix}) does not have; {install_hint()}")
    host, port = str(cfg.serving.http_host), int(cfg.serving.http_port)
    starts_ray = resolve_address(cfg.cluster.address) is None and not ray_initialized()
    if any(b.serve for b in backends.values()) and starts_ray and not port_free(host, port):
        raise ConfigError(f"serving.http_port: {host}:{port} is already in use by another process (an "
                          f"`opteval serve`, another sweep?); stop it or choose a free port, e.g. "
                          f"serving.http_port={port + 1}")


def missing_benchmarks(cfg: SweepConfig) -> list[str]:
    """Configured benchmarks whose normalized file is absent from the data directory."""
    # deferred: loads after main() installs signals (Ctrl-C -> exit 130)
    from opteval.evalcore import problems as P

    return [b for b in cfg.benchmarks if P.get_entry(b).upstream is not None
            and not P.benchmark_path(b, cfg.data.dir).exists()]


def ensure_data(cfg: SweepConfig) -> None:
    """Fetch absent benchmarks (``data.fetch_missing``, the default) so no manual data step
    precedes a job; the files are sha256-pinned, so fetching cannot change the numbers."""
    # deferred: loads after main() installs signals (Ctrl-C -> exit 130)
    from opteval.cluster.driver import signals
    from opteval.evalcore import problems as P
    from opteval.sweepcore.config import ConfigError

    missing = missing_benchmarks(cfg)
    if not missing:
        return
    ddir = P.data_dir(cfg.data.dir)
    fetch_cmd = f"opteval data fetch {' '.join(missing)}"
    if not cfg.data.fetch_missing:
        raise ConfigError(f"data.fetch_missing=false and {len(missing)} benchmark file(s) are not in {ddir}: "
                          f"{', '.join(missing)}; fetch them with `{fetch_cmd}` (or set OPTEVAL_DATA / data.dir "
                          "to a directory holding them)")
    # deferred: the fetcher loads only when benchmark files are missing
    from opteval.jobs.data import FetchError, base_url, fetch_one

    base = base_url(None, cfg.data.base_url)
    failed: list[str] = []
    reason = ""
    for slug in missing:
        signals.step(f"fetching {slug}")
        try:
            r = fetch_one(slug, base, ddir)
            print(f"[sweep] data: {r.action} {slug} -> {r.path}", flush=True)
        except (FetchError, P.BenchmarkLoadError, OSError) as exc:
            failed.append(slug)
            reason = reason or _one_line(exc)
    if failed:
        raise ConfigError(
            f"data.fetch_missing: could not fetch {', '.join(failed)} into {ddir} ({reason}); offline, fetch from a "
            f"mirror (`opteval data fetch {' '.join(failed)} --base-url file:///path/to/mirror`, or "
            "data.base_url=...) or set OPTEVAL_DATA to a directory holding the files")


def check_job_storage(cfg: SweepConfig) -> None:
    """Under ``ray job submit`` the working directory is a temporary unpacked package whose
    path changes with every upload: a relative ledger there would be lost on resume."""
    # deferred: loads after main() installs signals (Ctrl-C -> exit 130)
    from opteval.sweepcore.config import ConfigError

    if not os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR"):
        return
    out = cfg.sweep.output_dir
    if "://" not in out and not os.path.isabs(out):
        raise ConfigError(
            f"sweep.output_dir={out} is relative; under ray job submit it resolves inside the job's "
            f"temporary working_dir ({os.getcwd()}) and a resumed job would not see it: use shared "
            "storage (s3://bucket/prefix) or an absolute path on a shared volume")
    if "://" in out and not out.startswith("file://") and not (cfg.tracking.uri or os.environ.get("MLFLOW_TRACKING_URI")):
        print("warning: no tracking.uri / MLFLOW_TRACKING_URI: MLflow would write a SQLite file into the job's "
              "temporary working_dir; the ledger stays the truth (report.py --sync-mlflow re-logs later)",
              file=sys.stderr, flush=True)


def plan_only(cfg: SweepConfig) -> int:
    """Expand the plan and consult the ledger; never imports Ray and never downloads.

    Without some benchmark files the counts come from the registry (each registered
    benchmark is pinned by its count), so the totals are exact; which of those keys are
    committed cannot be checked until the files are there."""
    # deferred: loads after main() installs signals (Ctrl-C -> exit 130)
    from opteval.cluster.driver.prepare import plan_report, prepare

    missing = missing_benchmarks(cfg)
    if missing:
        # deferred: only when some benchmark files are missing
        from opteval.sweepcore.plan import registry_plan_report

        print(registry_plan_report(cfg, missing), flush=True)
        return 0
    prep = prepare(cfg, read_only=True)
    print(plan_report(prep), flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    sys.exit(main())
