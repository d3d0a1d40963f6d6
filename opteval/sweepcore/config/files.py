"""Where the YAML configs live and how one is read: ``configs_dir``, YAML files, OmegaConf merges
whose errors start with the key path (and name the file), and ``_check``."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from opteval.evalcore.registry import CONFIG_FILES
from opteval.sweepcore.config_errors import ConfigError
from opteval.sweepcore.config_errors import hint as _hint

CONFIGS_ENV = "OPTEVAL_CONFIGS"
SHIPPED_CONFIGS = Path(__file__).resolve().parents[2] / "configs"  # opteval/configs
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


# -- locations ---------------------------------------------------------------------------


def configs_dir() -> Path:
    """Where the YAML configs are: ``$OPTEVAL_CONFIGS``; else a ``configs/`` folder of the user's in
    the working directory (one holding ``sweep.yaml`` and ``methods/``); else the checkout's
    ``configs/`` (``opteval/configs``: the checkout's top-level ``configs`` links to it, and the wheel
    ships it inside the package), so an installed opteval runs from any folder. A folder replaces the shipped one whole."""
    env = os.environ.get(CONFIGS_ENV)
    if env:
        return Path(env).expanduser().resolve()
    try:
        here: list[Path] = [Path.cwd() / "configs"]
    except OSError:  # a process whose working directory was removed (a Ray worker's temp dir)
        here = []
    for cand in here:
        if (cand / "sweep.yaml").is_file() and (cand / "methods").is_dir():
            return cand.resolve()
    return SHIPPED_CONFIGS


def _known(kind: str) -> list[str]:
    d = configs_dir() / kind
    own = {p.stem for p in d.glob("*.yaml")} if d.is_dir() else set()
    return sorted(own | set(CONFIG_FILES[kind].names() if kind in CONFIG_FILES else ()))


def entity_path(kind: str, name: str) -> Path:
    """Where the ``kind`` (methods, benchmarks, models) config ``name`` is read from: a file
    registered by path or by a plugin (opteval.evalcore.registry.CONFIG_FILES), else configs/<kind>/."""
    files = CONFIG_FILES.get(kind)
    if files is not None and name in files:
        return files[name]
    return configs_dir() / kind / f"{name}.yaml"


# -- OmegaConf plumbing ---------------------------------------------------------------------


def _omega_error(exc: OmegaConfBaseException, where: str, node: Any = None) -> ConfigError:
    """Turn an OmegaConf error into a ConfigError that starts with the key path."""
    key = getattr(exc, "full_key", None) or getattr(exc, "key", None) or "<config>"
    msg = str(getattr(exc, "msg", None) or exc).splitlines()[0]
    if "not in struct" in msg or "Key '" in msg and "not in" in msg:
        parent = str(key).rsplit(".", 1)[0] if "." in str(key) else ""
        known = _keys_at(node, parent) if node is not None else []
        leaf = str(key).rsplit(".", 1)[-1]
        msg = f"unknown key{_hint(leaf, known) if known else ''}"
    return ConfigError(f"{key}: {msg} [{where}]")


def _keys_at(node: Any, dotted: str) -> list[str]:
    try:
        sub = OmegaConf.select(node, dotted) if dotted else node
        return sorted(str(k) for k in sub.keys()) if isinstance(sub, DictConfig) else []
    except OmegaConfBaseException:
        return []


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def _merge(base: DictConfig, data: Any, where: str) -> DictConfig:
    try:
        return OmegaConf.merge(base, data)  # type: ignore[return-value]
    except OmegaConfBaseException as exc:
        raise _omega_error(exc, where, base) from exc


def _check(cond: bool, key: str, msg: str) -> None:
    if not cond:
        raise ConfigError(f"{key}: {msg}")
