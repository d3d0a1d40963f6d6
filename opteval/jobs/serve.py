"""Stand model endpoints up without a sweep and print their URLs (interactive use).

    python jobs/serve.py models=[Qwen3-4B]                   # vLLM via ray.serve.llm (GPU + '.[gpu]')
    python jobs/serve.py models=[sim-small] serving.http_port=8001
    python jobs/serve.py models=[Qwen3-4B] serving.standin=true  # the real placement, simulated answers
    python jobs/serve.py configs/sweeps/paper.yaml models=[Qwen3-0.6B,Qwen3-1.7B] hold=false

Arguments are the sweep's (``opteval.sweepcore.config.load_config``: optional YAML, then a dotlist),
plus ``hold=true|false`` (default true: keep serving until Ctrl-C, then tear down what this
command deployed; SIGTERM does the same). Backends: ``vllm`` models go into one ``ray.serve.llm`` application
(``opteval.cluster.serve.llm_serving``; they must fit the GPUs at once, else the error names the stages),
``simulated`` ones into the simulated policy's Serve app, and ``openai`` ones are external
servers (vLLM or SGLang run elsewhere): nothing is deployed, their URL and key variable are
printed. Each printed line works with any OpenAI client:
``OpenAI(base_url=<url>, api_key=...).chat.completions.create(model=<model_id>, ...)``.
Exit 5 (one line) when Ray's start-up timed out on every attempt (docs/errors.md).
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

from opteval.exit_codes import ExitCode
from opteval.jobs.args import JobParser, job_parser, parse


def split_args(argv: list[str]) -> tuple[list[str], bool]:
    """Take ``hold=`` out of the sweep arguments (it is this command's own switch)."""
    hold, rest = True, []
    for a in argv:
        if a.startswith("hold="):
            val = a.split("=", 1)[1].strip().lower()
            if val not in ("true", "false", "1", "0", "yes", "no"):
                raise SystemExit(f"hold={val!r}: expected true or false")
            hold = val in ("true", "1", "yes")
        else:
            rest.append(a)
    return rest, hold


def build_parser() -> JobParser:
    """``opteval serve``'s line: ``--help``, then the sweep's arguments and ``hold=``, every word as
    given (load_config names a stray ``--x``: serve has no option)."""
    return job_parser("serve", __doc__ or "", unknown=None)


def endpoint_line(ep: Any) -> str:
    key = f"  api key: ${ep.api_key_env}" if getattr(ep, "api_key_env", None) else ""
    sim = "  [simulated]" if ep.simulated else ""
    return f"{ep.name}: base_url={ep.base_url} model={ep.model_id}{key}{sim}"


def stage_models(cfg: Any) -> list[dict[str, Any]]:
    """The configured models as plain data, in order; each must have an endpoint to print."""
    # deferred: importing this job stays light (config: omegaconf, pyarrow)
    from opteval.sweepcore.backends import backend_of
    from opteval.sweepcore.config import as_plain, model_config

    models = [as_plain(model_config(str(n))) for n in cfg.models]
    for m in models:
        if backend_of(m, cfg.serving).in_process:
            raise SystemExit(f"model {m['name']!r}: backend {m['backend']!r} has no endpoint to serve")
    return models


def stand_up(cfg: Any) -> tuple[dict[str, Any], list[str]]:
    """Deploy (or point at) every configured model at once, each as the sweep's schedule would
    (``deploy_stage``: one app per model); returns endpoints and the Serve apps we own."""
    # deferred: serving imports Ray; loaded only when deploying
    from opteval.cluster.serve import serving
    from opteval.sweepcore.backends import backend_of

    models = stage_models(cfg)
    need = sum(backend_of(m, cfg.serving).gpus(m) for m in models if _on_gpus(m, cfg))
    if need and need > serving.cluster_gpus(cfg):
        raise SystemExit(f"the GPU models need {need} GPUs at once but the cluster has "
                         f"{serving.cluster_gpus(cfg)}; serve fewer models per command")
    # One stage: placement checked, ready = RUNNING + a 1-token answer, torn down on failure.
    eps = serving.deploy_stage(models, cfg)
    apps = sorted({ep.app_name for ep in eps.values() if ep.app_name})
    return eps, apps


def _on_gpus(model: dict[str, Any], cfg: Any) -> bool:
    # deferred: importing this job stays light (backends: httpx)
    from opteval.sweepcore.backends import backend_of

    return backend_of(model, cfg.serving).on_gpus


def preflight(cfg: Any) -> tuple[bool, str | None]:
    """Before starting Ray: (whether any model needs this Ray cluster, why one cannot run here)."""
    # deferred: deployers imports Ray; not loaded for --help or bad input
    from opteval.cluster.serve.deployers import deployer_of
    from opteval.cluster.serve.llm_serving import VLLMNotInstalled
    from opteval.sweepcore.backends import backend_of
    from opteval.sweepcore.config import model_config

    backends = {str(n): backend_of(model_config(str(n)), cfg.serving) for n in cfg.models}
    for name, b in backends.items():
        try:  # say what to install, not a traceback from a replica
            deployer_of(b).preflight()
        except VLLMNotInstalled as exc:
            same = sorted(n for n, o in backends.items() if o is b)
            return True, f"cannot serve {same or [name]}: {exc}"
    return any(b.serve for b in backends.values()), None


def main(argv: list[str] | None = None) -> int:
    # deferred: importing this job stays light (config: omegaconf, pyarrow)
    from opteval.sweepcore.config import ConfigError, load_config

    line = parse(build_parser(), list(sys.argv[1:] if argv is None else argv))
    if line is None:  # --help
        return 0
    args, hold = split_args(line.overrides)
    try:
        cfg = load_config(args)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    needs_ray, cannot = preflight(cfg)
    if cannot:
        print(cannot, file=sys.stderr)
        return ExitCode.UNAVAILABLE
    rt = None
    if needs_ray:
        # deferred: only models served on Ray start it
        from opteval.cluster import runtime

        try:
            rt = runtime.connect(cfg.cluster.address)
        except runtime.RayStartupError as exc:
            print(f"startup error: {' '.join(str(exc).split())}", file=sys.stderr)
            return ExitCode.STARTUP
        if not hold and rt.started_local:
            print("note: hold=false on a Ray cluster this command started: the endpoints stop when it "
                  "exits; start one first (ray start --head) and pass cluster.address=auto", file=sys.stderr)
    apps: list[str] = []
    old_term = _sigterm_stops()
    try:
        eps, apps = stand_up(cfg)
        for ep in eps.values():
            print(endpoint_line(ep), flush=True)
        if hold and apps:
            print("serving; Ctrl-C to stop", flush=True)
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        pass
    except Exception as exc:  # placement refused, deploy failed, not ready: one line, exit 1
        # deferred: only a failure needs these error types
        from opteval.cluster.serve.llm_serving import ModelConfigError, ModelNotReady, UnplaceableModel
        from opteval.cluster.serve.serving import ServingError

        if not isinstance(exc, (ModelConfigError, ModelNotReady, UnplaceableModel, ServingError)):
            raise
        print(f"cannot serve: {exc}", file=sys.stderr)
        return ExitCode.FAILED
    finally:
        try:
            if hold and apps:
                # deferred: only apps this command deployed are torn down
                from opteval.cluster.serve.llm_serving import teardown

                print(f"tearing down {', '.join(apps)}", flush=True)
                for app in apps:
                    teardown(app)  # the app and its prefix-tree actors
            if rt is not None:
                # deferred: only when Ray was connected above
                from opteval.cluster import runtime

                runtime.disconnect(rt)
        finally:
            if old_term is not None:
                signal.signal(signal.SIGTERM, old_term)
    return 0


def _sigterm_stops() -> Any:
    """SIGTERM (``kill``, a container stopping, ``ray job stop``) stops serving the way Ctrl-C
    does: a KeyboardInterrupt, so what this command deployed is torn down (the app would
    otherwise stay deployed, answering and holding its GPUs, on a cluster this command joined).
    A second SIGTERM during the teardown is ignored with a line. Returns the previous handler
    (None off the main thread, where Python cannot install one)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def stop(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, lambda *_: print("teardown in progress; SIGTERM ignored", file=sys.stderr,
                                                       flush=True))
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, stop)


if __name__ == "__main__":
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    sys.exit(main())
