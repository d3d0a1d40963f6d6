"""``backend: openai``: a server someone else runs (vLLM, SGLang, a hosted API); nothing to deploy."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

from opteval.sweepcore.backends.base import Backend, Where


class OpenAIBackend(Backend):
    name = "openai"
    asks_server = True
    section = "openai"

    def check(self, model: Mapping[str, Any], where: Where) -> None:
        oc = dict(model.get("openai") or {})
        for key in ("base_url", "model_id"):
            if not oc.get(key):
                raise where.error(f"openai.{key}", "the openai backend needs openai.base_url and openai.model_id")
        url = urlparse(str(oc["base_url"]))
        if url.scheme not in ("http", "https") or not url.netloc:
            raise where.error("openai.base_url", f"must be an http(s) URL such as http://host:8000/v1, "
                                                 f"got {oc['base_url']!r}")
        for key in ("timeout_s",):
            if not float(oc[key]) > 0:
                raise where.error(f"openai.{key}", f"must be > 0, got {oc[key]!r}")
        for key in ("max_retries", "backoff_s"):
            if oc.get(key) is not None and not float(oc[key]) >= 0:
                raise where.error(f"openai.{key}", f"must be >= 0, got {oc[key]!r}")

    def client_config(self, model: Mapping[str, Any]) -> dict[str, Any]:
        """``{name, backend, base_url, model_id, ...}`` (unset keys left out) and the model's
        ``sampling.extra_body`` as the client's own request extras."""
        out = super().client_config(model)
        out.update({k: v for k, v in dict(model.get("openai") or {}).items() if v is not None})
        extra = dict(dict(model.get("sampling") or {}).get("extra_body") or {})
        if extra:
            out["extra_body"] = extra
        return out
