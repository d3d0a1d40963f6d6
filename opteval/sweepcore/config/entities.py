"""Model, method and benchmark configs, read per name (``configs/<kind>/<name>.yaml``, or a model
given in the sweep config by path or inline), validated once (errors name the file and key) and
cached per file state. A model's backend (``opteval.sweepcore.backends``) checks its own section."""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from omegaconf import DictConfig, OmegaConf

from opteval.evalcore.extraction import PROFILES as EXTRACTION_PROFILES
from opteval.evalcore.grading import PROFILES
from opteval.evalcore.harnesses._common import STAGE_SAMPLING_KEYS
from opteval.evalcore.harnesses.registry import REGISTRY as HARNESS_REGISTRY
from opteval.evalcore.harnesses.registry import get_harness
from opteval.evalcore.models.contract import SYSTEM_MODES
from opteval.evalcore.problems import REGISTRY, register_local_benchmark
from opteval.evalcore.registry import RegistryError, register_config_file
from opteval.sweepcore.backends import BACKENDS, Where, backend_of
from opteval.sweepcore.config.files import _NAME_RE, _check, _known, _merge, _read_yaml, configs_dir, entity_path
from opteval.sweepcore.config.schema import BenchmarkConfig, MethodConfig, ModelConfig, as_plain
from opteval.sweepcore.config_errors import ConfigError
from opteval.sweepcore.config_errors import hint as _hint

T = TypeVar("T")


def _model_exists(name: str) -> bool:
    return name in _GIVEN or (configs_dir() / "models" / f"{name}.yaml").is_file()


def _method_exists(name: str) -> bool:
    return entity_path("methods", name).is_file()


def benchmark_known(slug: str) -> bool:
    """A slug with a configs/benchmarks yaml, or one opteval.evalcore.problems.REGISTRY knows."""
    return entity_path("benchmarks", slug).is_file() or slug in REGISTRY


# -- model / method / benchmark configs ----------------------------------------------------------


def _load_entity(kind: str, name: str, schema: type, name_key: str) -> DictConfig:
    path = entity_path(kind, name)
    if not path.is_file():
        raise ConfigError(f"{name}: no {path}{_hint(name, _known(kind))}")
    node = _merge(OmegaConf.structured(schema), _read_yaml(path), str(path))
    OmegaConf.set_readonly(node, False)  # a frozen schema's node: the name is filled in below
    given = node[name_key]
    if given and given != name:
        raise ConfigError(f"{name_key}: {given!r} differs from the file name {name!r} [{path}]")
    node[name_key] = name
    return node


_CACHE: dict[tuple[Any, ...], Any] = {}


def _cached(kind: str, name: str, build: Callable[[str], T]) -> T:
    """Validated entity configs are cached per file state and returned read-only (frozen
    dataclasses, or a read-only DictConfig): planning asks for them hundreds of times and
    OmegaConf construction is slow."""
    path = entity_path(kind, name)
    try:
        st = path.stat()
        sig: tuple[Any, ...] = (st.st_mtime_ns, st.st_size)
    except OSError:
        sig = (None,)
    key = (kind, name, str(path), *sig)
    node = _CACHE.get(key)
    if node is None:
        node = build(name)
        if isinstance(node, DictConfig):
            OmegaConf.set_readonly(node, True)
        _CACHE[key] = node
    return node


def model_config(name: str) -> DictConfig:
    """A model given in the sweep config (a YAML path or a mapping in ``models``), else
    ``configs/models/<name>.yaml``; validated (errors name the file and key); read-only."""
    given = _GIVEN.get(name)
    if given is not None:
        return given
    return _cached("models", name, _build_model_config)


def _build_model_config(name: str) -> DictConfig:
    node = _load_entity("models", name, ModelConfig, "name")
    _check_model(node, _where(str(configs_dir() / "models" / f"{name}.yaml")))
    return node


def _where(source: str, prefix: str = "") -> Where:
    return Where(source, prefix)


def _check_model(node: DictConfig, where: Where) -> None:
    """The one validation of a model config: the schema typed it; its backend checks its own
    section; another backend's section left at its defaults (set, it would do nothing)."""
    if node.backend is None:
        raise where.error("backend", f"missing: say which backend serves this model, one of {sorted(BACKENDS)}")
    backend = BACKENDS.get(str(node.backend))
    if backend is None:
        raise where.error("backend", f"unknown backend {node.backend!r}{_hint(str(node.backend), list(BACKENDS))}")
    plain = as_plain(node)
    defaults = as_plain(OmegaConf.structured(ModelConfig))
    for other in BACKENDS.values():
        sec = other.section
        if sec and other is not backend and plain.get(sec) != defaults.get(sec):
            raise where.error(sec, f"set, but backend is {backend.name!r}: only the {backend.section!r} "
                                   f"section takes effect")
    backend.check(plain, where)
    if node.prompt.system not in SYSTEM_MODES:
        raise where.error("prompt.system", f"must be one of {list(SYSTEM_MODES)}, got {node.prompt.system!r}")


# -- models given in the sweep config (a YAML anywhere, or inline) -----------------------------

# name -> validated model config, for models given by path or inline in this process's
# sweep config; model_config() answers them first. A given model's fingerprint covers its
# whole config, as a file model's does, so a resume with a changed one is caught.
_GIVEN: dict[str, DictConfig] = {}
_MODEL_SUFFIXES = (".yaml", ".yml")


def _take_models(data: Any, where: str) -> Any:
    """``models``, ``methods`` and ``benchmarks`` of a config layer with every path (and, for
    models, every mapping) entry registered and replaced by its name (what the plan, the ledger
    keys and the reports use)."""
    if not isinstance(data, dict):
        return data
    out = dict(data)
    if isinstance(data.get("models"), list):
        out["models"] = [_given_model(entry, i, where) for i, entry in enumerate(data["models"])]
    for kind in ("methods", "benchmarks"):
        if isinstance(data.get(kind), list):
            out[kind] = [_given_file(kind, entry, i, where) for i, entry in enumerate(data[kind])]
    return out


def _given_file(kind: str, entry: Any, i: int, where: str) -> Any:
    """A method or benchmark YAML given by path: registered under its stem (a benchmark's slug,
    a method's name), which is what the rest of the sweep sees."""
    if not (isinstance(entry, str) and (entry.endswith(_MODEL_SUFFIXES) or "/" in entry)):
        return entry
    path = Path(entry).expanduser()
    if not path.is_file():
        raise ConfigError(f"{kind}[{i}]: no such {kind[:-1]} file {entry!r} (relative to {Path.cwd()}) [{where}]")
    path = path.resolve()
    own = configs_dir() / kind / f"{path.stem}.yaml"
    if own.is_file() and own.resolve() != path:
        raise ConfigError(f"{kind}[{i}]: {path.stem!r} is also configs/{kind}/{path.stem}.yaml: "
                          f"give this file another name [{where}]")
    try:
        return register_config_file(kind, path)
    except RegistryError as exc:
        raise ConfigError(f"{kind}[{i}]: {exc} [{where}]") from None


def _given_model(entry: Any, i: int, where: str) -> Any:
    key = f"models[{i}]"
    if isinstance(entry, dict):
        return _register(entry, _where(where, f"{key}."), None)
    if isinstance(entry, str) and (entry.endswith(_MODEL_SUFFIXES) or "/" in entry):
        path = Path(entry).expanduser()
        if not path.is_file():
            raise ConfigError(f"{key}: no such model file {entry!r} (relative to {Path.cwd()}) [{where}]")
        path = path.resolve()
        if path.parent == configs_dir() / "models":
            return path.stem  # one of ours, by its path
        return _register(_read_yaml(path), _where(str(path)), path.stem)
    return entry  # a name: configs/models/<name>.yaml, checked with the others


def _register(data: dict[str, Any], where: Where, default_name: str | None) -> str:
    try:
        node = _merge(OmegaConf.structured(ModelConfig), data, where.source)
    except ConfigError as exc:
        raise ConfigError(f"{where.prefix}{exc}") from None
    name = str(node.name or default_name or "")
    if not name:
        raise where.error("name", "a model given inline needs a name")
    if not _NAME_RE.match(name):
        raise where.error("name", f"{name!r} is not a valid model name (letters, digits, '.', '_', '-')")
    if (configs_dir() / "models" / f"{name}.yaml").is_file():
        raise where.error("name", f"{name!r} is also configs/models/{name}.yaml: give this model another name")
    node.name = name
    _check_model(node, where)
    OmegaConf.set_readonly(node, True)
    _GIVEN[name] = node
    return name


def backend_config(name: str) -> dict[str, Any]:
    """The flat dict ``opteval.evalcore.models.make_model`` takes, built from a model config."""
    return flat_backend_config({**as_plain(model_config(name)), "name": name})


def flat_backend_config(model: Mapping[str, Any]) -> dict[str, Any]:
    """A model config as plain data -> the flat dict ``opteval.evalcore.models.make_model`` takes.

    simulated: ``{name, backend, skill: {SimSkill fields}, ttft_s, tokens_per_s, ...}``;
    openai: ``{name, backend, base_url, model_id, ...}``; replay: ``{name, backend, path}``
    (unset keys left out). A vllm model is served by the cluster and reached as ``openai``
    at its Serve URL, so it has no backend config of its own here. Pure: Serve replicas
    call it on the dict they were given, without reading config files.
    """
    return backend_of(model).client_config(model)


def method_config(name: str) -> MethodConfig:
    """``configs/methods/<name>.yaml``: harness, extraction profile, budget overrides."""
    return _cached("methods", name, _build_method_config)


def _build_method_config(name: str) -> MethodConfig:
    node = _load_entity("methods", name, MethodConfig, "name")
    path = entity_path("methods", name)
    for section in ("budgets", "limits"):
        for key, v in node[section].items():
            _check(v is None or v > 0, f"{section}.{key} [{path}]", f"must be > 0, got {v!r}")
    for stage, over in node.stages.items():
        _check(isinstance(over, DictConfig), f"stages.{stage} [{path}]", "must be a mapping of request fields")
        bad = sorted(set(over) - set(STAGE_SAMPLING_KEYS))
        _check(not bad, f"stages.{stage}.{bad[0] if bad else ''} [{path}]",
               f"unknown request field; allowed {list(STAGE_SAMPLING_KEYS)}")
    method = OmegaConf.to_object(node)
    assert isinstance(method, MethodConfig)
    try:  # the registry (opteval.evalcore.harnesses.registry); ``<module>:<name>`` imports a harness from elsewhere
        get_harness(method.harness)
    except KeyError:
        known = HARNESS_REGISTRY.names()
        _check(False, f"harness [{path}]", f"unknown harness {method.harness!r}{_hint(method.harness, known)}")
    _check(method.extraction in EXTRACTION_PROFILES, f"extraction [{path}]",
           f"unknown extraction profile {method.extraction!r}{_hint(method.extraction, sorted(EXTRACTION_PROFILES))}")
    _check_params(method, path)
    return method


def _check_params(method: MethodConfig, path: Path) -> None:
    """A harness that states its parameters (``check_params``) validates ``params`` here, so a
    typo fails at config load with the file named, not in every trajectory."""
    harness = get_harness(method.harness)  # known: the method check above found it
    check = getattr(harness, "check_params", None)
    if check is not None:
        try:
            check(as_plain(method.params))
        except ValueError as exc:
            raise ConfigError(f"{exc} [{path}]") from None


def benchmark_config(slug: str) -> BenchmarkConfig:
    """``configs/benchmarks/<slug>.yaml``; a registry slug without a file gets the defaults
    (a ``<name>@sirl`` variant inherits ``<name>``'s sample count)."""
    return _cached("benchmarks", slug, _build_benchmark_config)


def _build_benchmark_config(slug: str) -> BenchmarkConfig:
    path = entity_path("benchmarks", slug)
    if path.is_file():
        bench = OmegaConf.to_object(_load_entity("benchmarks", slug, BenchmarkConfig, "slug"))
        assert isinstance(bench, BenchmarkConfig)
    elif slug in REGISTRY:
        base = slug.split("@", 1)[0]
        inherited = base != slug and entity_path("benchmarks", base).is_file()
        bench = BenchmarkConfig(slug=slug, samples=benchmark_config(base).samples if inherited else None)
    else:
        raise ConfigError(f"{slug}: no {path}{_hint(slug, _known('benchmarks'))}")
    _check(bench.samples is None or bench.samples > 0, f"samples [{path}]", f"must be > 0, got {bench.samples!r}")
    if bench.grading is not None:
        _check(bench.grading in PROFILES, f"grading [{path}]",
               f"unknown grading profile {bench.grading!r}{_hint(bench.grading, list(PROFILES))}")
    if bench.path is not None:
        _register_local(bench, path)
    else:
        _check(bench.sha256 is None, f"sha256 [{path}]", "only a local benchmark (path:) takes a sha256")
        _check(slug in REGISTRY, f"path [{path}]",
               f"missing: {slug!r} is not a pinned benchmark{_hint(slug, sorted(REGISTRY))}, so its YAML must "
               f"give path: to a JSONL of id, question, answer")
    return bench


def _register_local(bench: BenchmarkConfig, yaml_path: Path) -> None:
    """``path:`` (relative: to the YAML's folder) -> opteval.evalcore.problems' registry."""
    assert bench.path is not None
    file = Path(bench.path).expanduser()
    file = file if file.is_absolute() else (yaml_path.parent / file).resolve()
    _check(file.is_file(), f"path [{yaml_path}]", f"no such file {str(file)!r}")
    if bench.sha256 is not None:
        _check(re.fullmatch(r"[0-9a-f]{64}", bench.sha256) is not None, f"sha256 [{yaml_path}]",
               f"must be 64 lower-case hex digits (quote it in YAML), got {bench.sha256!r}")
    try:
        register_local_benchmark(bench.slug, file, bench.sha256)
    except ValueError as exc:
        raise ConfigError(f"slug [{yaml_path}]: {exc}") from None
