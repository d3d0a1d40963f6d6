"""vLLM's engine and frontend argument names, checked on machines without vLLM.

Why a saved list: Ray's ``LLMConfig`` passes ``engine_kwargs`` through unchecked until the
replica starts on a GPU node, where a typo (``max_num_seq``) fails the stage after minutes.
``ray.serve.llm`` splits ``engine_kwargs`` between vLLM's ``FrontendArgs`` and
``AsyncEngineArgs`` dataclasses and rejects anything else ("Unknown engine argument");
``vllm_args.txt`` holds those field names for the pinned vLLM, so the check runs anywhere.

Refresh it after changing the pin (downloads the wheel only, no install, no GPU):

    python -m opteval.cluster.serve.vllm_args --refresh 0.32.0
"""
from __future__ import annotations

import ast
import sys
import tempfile
import zipfile
from functools import lru_cache
from pathlib import Path

from opteval.exit_codes import ExitCode

ARGS_FILE = Path(__file__).with_name("vllm_args.txt")
# (module path inside the wheel, class names whose dataclass fields are accepted)
SOURCES = (
    ("vllm/engine/arg_utils.py", ("EngineArgs", "AsyncEngineArgs")),
    ("vllm/entrypoints/launchers/cli_args.py", ("BaseFrontendArgs", "FrontendArgs")),
)


@lru_cache(maxsize=1)
def known_args() -> tuple[str, frozenset[str]]:
    """(vLLM version, argument names) from the saved list."""
    version, names = "unknown", set()
    for line in ARGS_FILE.read_text().splitlines():
        line = line.strip()
        if line.startswith("# vllm=="):
            version = line.split("==", 1)[1].strip()
        elif line and not line.startswith("#"):
            names.add(line)
    return version, frozenset(names)


def unknown_args(engine_kwargs: dict) -> list[str]:
    """Keys of ``engine_kwargs`` that the pinned vLLM does not accept."""
    _, names = known_args()
    return sorted(k for k in engine_kwargs if k not in names)


def _class_fields(source: str, classes: tuple[str, ...]) -> set[str]:
    """Annotated class-level names (dataclass fields) of the named classes, by AST."""
    out: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name in classes:
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    if "ClassVar" not in ast.unparse(stmt.annotation):
                        out.add(stmt.target.id)
    return out


def names_from_wheel(wheel: Path) -> set[str]:
    names: set[str] = set()
    with zipfile.ZipFile(wheel) as z:
        for path, classes in SOURCES:
            names |= _class_fields(z.read(path).decode(), classes)
    return names


def refresh(version: str) -> int:
    # deferred: only --refresh runs pip
    import subprocess

    with tempfile.TemporaryDirectory(prefix="vllm-args-") as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", f"vllm=={version}", "--no-deps", "-d", tmp],
                       check=True)
        wheel = next(Path(tmp).glob("vllm-*.whl"))
        names = names_from_wheel(wheel)
    header = [f"# vllm=={version}",
              "# Field names of vLLM's EngineArgs/AsyncEngineArgs and (Base)FrontendArgs: the keys",
              "# ray.serve.llm accepts in LLMConfig.engine_kwargs. "
              "Regenerate: python -m opteval.cluster.serve.vllm_args --refresh VERSION"]
    ARGS_FILE.write_text("\n".join(header + sorted(names)) + "\n")
    print(f"{ARGS_FILE}: {len(names)} argument names of vllm=={version}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--refresh":
        sys.exit(refresh(sys.argv[2]))
    print(__doc__.strip())
    sys.exit(ExitCode.USAGE)
