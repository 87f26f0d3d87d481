"""The FastAPI application: routes, authentication, errors in the OpenAI schema.

Routes: `GET /health` (no key needed), `GET /metrics` (Prometheus text, by `prometheus_client`),
`GET /v1/models`, `POST /v1/completions`, `POST /v1/chat/completions`, `GET /v1/audit/head`.
Every error, including unknown routes and internal failures, is a JSON body
`{"error": {...}}`; an exception while serving one request fails that request only. The
engine loop thread runs for the app's lifespan (started at start-up, stopped at shutdown).
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request

from samebits.audit.writer import AuditLogWriter
from samebits.server.api import OpenAIService
from samebits.server.audit_hook import AuditRecorder
from samebits.server.config import ServerConfig
from samebits.server.engine_loop import EngineLoop
from samebits.server.errors import APIError, error_body
from samebits.server.flavors import ChatFlavor, CompletionFlavor
from samebits.server.generation import ClientGone
from samebits.server.metrics import ServerMetrics

logger = logging.getLogger("samebits.server")
COMPLETION = CompletionFlavor()
CHAT = ChatFlavor()


@dataclass(frozen=True)
class _Parts:
    """What the routes of one app share."""

    engine: Any
    config: ServerConfig
    engine_loop: EngineLoop
    metrics: ServerMetrics
    recorder: AuditRecorder
    service: OpenAIService
    audit_writer: AuditLogWriter | None
    created: int


def build_app(
    engine: Any, config: ServerConfig, audit_writer: AuditLogWriter | None = None
) -> FastAPI:
    """An app serving `engine` (an `LLMEngine` or anything with its contract).

    The app owns the engine loop thread (started and stopped with its lifespan), not the
    audit writer: the caller closes the writer after the server stopped.
    """
    metrics = ServerMetrics()
    engine_loop = EngineLoop(engine, on_step=metrics.on_step)
    metrics.watch(lambda: engine.stats(), lambda: engine_loop.num_live)
    recorder = AuditRecorder(
        audit_writer, str(engine.fingerprint), str(engine.model_name), metrics,
        getattr(engine, "numerics_id", None),
    )  # fmt: skip
    service = OpenAIService(engine_loop, config, recorder, metrics)
    parts = _Parts(
        engine, config, engine_loop, metrics, recorder, service, audit_writer, int(time.time())
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine_loop.start()
        yield
        engine_loop.stop()

    app = FastAPI(lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.engine_loop = engine_loop
    app.state.metrics = metrics
    _add_exception_handlers(app)
    auth = Depends(_authenticate(config.api_key))
    _add_info_routes(app, parts, auth)
    _add_completion_routes(app, parts, auth)
    return app


def _add_info_routes(app: FastAPI, parts: _Parts, auth: Any) -> None:
    @app.get("/health")
    async def health() -> JSONResponse:
        alive = parts.engine_loop.alive
        body = {
            "status": "ok" if alive else "engine stopped",
            "fingerprint": parts.recorder.fingerprint,
        }
        return JSONResponse(body, status_code=200 if alive else 503)

    @app.get("/metrics", dependencies=[auth])
    async def prometheus(request: Request) -> Response:
        body, content_type = parts.metrics.exposition(request.headers.get("accept"))
        return Response(body, media_type=content_type)

    @app.get("/v1/models", dependencies=[auth])
    async def models() -> dict:
        cards = [_model_card(n, parts.created, parts.engine) for n in parts.config.model_names]
        return {"object": "list", "data": cards}

    @app.get("/v1/audit/head", dependencies=[auth])
    async def audit_head() -> dict:
        writer = parts.audit_writer
        if writer is None:
            raise APIError(404, "this server runs without an audit log", None, "no_audit_log")
        head = writer.head
        return {
            "seq": head.seq,
            "entry_hash": head.entry_hash,
            "path": str(writer.path),
            "fingerprint": parts.recorder.fingerprint,
        }


def _add_completion_routes(app: FastAPI, parts: _Parts, auth: Any) -> None:
    @app.post("/v1/completions", dependencies=[auth])
    async def completions(request: Request) -> Response:
        call = parts.service.handle(request, COMPLETION)
        return await _counted(parts.metrics, COMPLETION.endpoint, call)

    @app.post("/v1/chat/completions", dependencies=[auth])
    async def chat_completions(request: Request) -> Response:
        return await _counted(parts.metrics, CHAT.endpoint, parts.service.handle(request, CHAT))


def _model_card(name: str, created: int, engine: Any) -> dict:
    return {
        "id": name,
        "object": "model",
        "created": created,
        "owned_by": "samebits",
        "max_model_len": int(engine.max_model_len),
        "samebits": {"fingerprint": str(engine.fingerprint)},
    }


async def _counted(metrics: ServerMetrics, endpoint: str, call: Awaitable[Response]) -> Response:
    try:
        response = await call
    except APIError as exc:
        metrics.on_request(endpoint, exc.status)
        raise
    except ClientGone:
        metrics.on_request(endpoint, 499)
        raise
    except Exception:
        metrics.on_request(endpoint, 500)
        raise
    metrics.on_request(endpoint, response.status_code)
    return response


def _authenticate(api_key: str | None):
    expected = None if api_key is None else api_key.encode()

    async def check(request: Request) -> None:
        if expected is None:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), expected):
            raise APIError(
                401, "missing or invalid API key: send 'Authorization: Bearer <key>'",
                None, "invalid_api_key",
            )  # fmt: skip

    return check


def _add_exception_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def api_error(request: Request, exc: APIError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = f"{exc.detail}: {request.method} {request.url.path}"
        return JSONResponse(error_body(exc.status_code, message), status_code=exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(error_body(400, f"invalid request: {exc.errors()}"), status_code=400)

    @app.exception_handler(ClientGone)
    async def client_gone(request: Request, exc: ClientGone) -> Response:
        return Response(status_code=499)

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        logger.error("request %s %s failed", request.method, request.url.path, exc_info=exc)
        message = f"internal error: {type(exc).__name__}: {exc}"
        return JSONResponse(error_body(500, message), status_code=500)
