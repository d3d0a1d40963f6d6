"""Chat calls to a model this cluster serves, through a Serve deployment handle (no HTTP proxy).

Why: on a sweep with a fast policy the HTTP proxy and the replica's HTTP handling cost more
CPU per trajectory than the program the model writes (``bench/bench_sweep.py``). A handle
call goes from the worker straight to a replica. What the model sees does not change: the
body is built and encoded by the same ``ChatCompletionsModel`` as over HTTP
(``encode_body``'s bytes), the side channel arrives as the same ``CallMeta`` the replica
would read from the ``X-Opteval-*`` headers, and the answer is the replica's (status, body),
parsed and classified exactly as an HTTP answer: 400/413/422 the model's failure for that
call, other 4xx a configuration fault, 408/429/5xx retried then ``ModelError``. A replica
that raises, dies or cannot be reached is what the proxy answers with a 5xx or a dropped
connection: retried, then ``ModelError`` (infrastructure).

The deployment must offer ``respond(raw: bytes, meta) -> (status, body bytes)``: the
simulated policy's ``SimulatedOpenAI`` and the stand-ins' ``StandinServer`` do.
"""
from __future__ import annotations

import asyncio
from typing import Any

from ray import serve

from opteval.cluster.serve.sim_serving import call_meta
from opteval.evalcore.models.base import CallMeta
from opteval.evalcore.models.openai_backend import ChatCompletionsModel, TransportFailure, meta_headers
from opteval.sweepcore.endpoint import Endpoint


class ServeHandleChatModel(ChatCompletionsModel):
    """``ChatModel`` over ``respond`` of a Serve deployment (``deployment`` in ``app``)."""

    def __init__(self, name: str, model_id: str, deployment: str, app: str, timeout_s: float = 600,
                 max_retries: int = 4, backoff_s: float = 1.0, extra_body: dict[str, Any] | None = None) -> None:
        super().__init__(name, model_id, f"serve://{app}/{deployment}", timeout_s=timeout_s,
                         max_retries=max_retries, backoff_s=backoff_s, extra_body=extra_body)
        self.deployment, self.app = deployment, app
        self._handle: Any = None

    def __repr__(self) -> str:
        return f"ServeHandleChatModel(name={self.name!r}, target={self.target!r}, model_id={self.model_id!r})"

    def _method(self) -> Any:
        if self._handle is None:
            # _check_exists=False: no blocking call to the controller on the worker's event
            # loop; a deployment that is not there fails the call (retried, then ModelError).
            # The router runs on Serve's own thread (its default): running it on the worker's
            # loop instead (the private _run_router_in_separate_loop=False) measured no cheaper.
            self._handle = serve.get_deployment_handle(self.deployment, self.app, _check_exists=False,
                                                       _record_telemetry=False)
        return self._handle.respond

    async def _send(self, raw: bytes, meta: CallMeta | None) -> tuple[int, bytes, float | None]:
        side = call_meta(meta_headers(meta))  # what the replica reads from the headers over HTTP
        try:
            response = self._method().remote(raw, side)
        except Exception as exc:  # no handle (Serve gone, app deleted)
            raise TransportFailure(f"no handle ({type(exc).__name__}: {exc})") from exc
        try:
            status, body = await asyncio.wait_for(_result(response), self.timeout_s)
        except TimeoutError as exc:
            response.cancel()
            raise TransportFailure(f"timeout after {self.timeout_s:g}s (handle call)") from exc
        except Exception as exc:  # the replica raised, died, or none could take the request
            raise TransportFailure(f"replica error ({type(exc).__name__}: {_first_line(exc)})") from exc
        return int(status), bytes(body), None


async def _result(response: Any) -> Any:
    return await response


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""


def handle_client(ep: Endpoint) -> ServeHandleChatModel:
    """The handle route's client of an endpoint whose ``handle`` is (deployment, app)."""
    if not ep.handle:
        raise ValueError(f"model {ep.name!r}: no Serve handle target (serving.route=http or an external URL)")
    deployment, app = ep.handle
    return ServeHandleChatModel(name=ep.name, model_id=ep.model_id, deployment=deployment, app=app,
                                timeout_s=ep.timeout_s, max_retries=ep.max_retries,
                                extra_body=dict(ep.extra_body or {}),
                                **({"backoff_s": ep.backoff_s} if ep.backoff_s is not None else {}))
