"""The WSGI application and its server."""

from __future__ import annotations

import secrets
import signal
import threading
from typing import TYPE_CHECKING, Any, Final

from flask import Flask, Response, jsonify, request

from saga.core import metrics
from saga.core.logs import get_logger
from saga.core.messages.signatures import SIGNATURE_HEADER
from saga.core.messages.webhooks import MAX_BODY_BYTES, MAX_HEADER_BYTES
from saga.core.ops.operators import Operators

if TYPE_CHECKING:
    from collections.abc import Callable

    from saga.core.engine import Engine
    from saga.core.messages.webhooks import WebhookDoor

log = get_logger(__name__)

DEFAULT_THREADS: Final = 4


def create_app(engine: Engine, *, door: WebhookDoor | None = None, console: bool = False) -> Flask:
    """
    The engine's HTTP face.

    ``GET /metrics`` and ``GET /healthz`` always; ``POST /webhooks/<provider>``
    through ``door`` when given; the operators' console (``/``) when
    ``console`` is set.
    """
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest  # noqa: PLC0415

    metrics.enable()
    registry = metrics.registry_for(engine.db)
    app = Flask("saga")
    # Larger bodies are cut off by the server (see serve); the door refuses
    # (and records) anything over its own, smaller limit.
    app.config["MAX_CONTENT_LENGTH"] = 4 * MAX_BODY_BYTES
    app.config["SECRET_KEY"] = secrets.token_hex(32)  # flashes only; sessions live in the database
    app.extensions["saga_engine"] = engine

    if door is not None:

        @app.post("/webhooks/<provider>")
        def webhook(provider: str) -> tuple[Response, int, dict[str, str]]:
            answer = door.receive(
                provider,
                request.get_data(cache=False),
                request.headers.get(SIGNATURE_HEADER),
                remote=request.remote_addr,
            )
            label = provider if provider in door.receivers else "other"
            metrics.WEBHOOKS.labels(label, str(answer.status)).inc()
            return jsonify(answer.body), answer.status, dict(answer.headers)

    @app.get("/metrics")
    def scrape() -> Response:
        return Response(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        providers = sorted(door.receivers) if door is not None else []
        return {"ok": True, "providers": providers, "console": console}

    if console:
        from saga.web import console as _console  # noqa: PLC0415 - only when served
        from saga.web import guard  # noqa: PLC0415

        app.after_request(guard.secure_headers)
        app.register_blueprint(guard.blueprint)
        app.register_blueprint(_console.blueprint)
        Operators(engine.db).prepare()
    return app


def serve(
    app: Flask,
    *,
    host: str,
    port: int,
    threads: int = DEFAULT_THREADS,
    trusted_proxy: str | None = None,
    ready: Callable[[str, int], None] | None = None,
) -> None:
    """
    Serve ``app`` with waitress until SIGTERM or SIGINT.

    ``ready`` hears the address actually bound (``--port 0`` picks a free one).
    ``trusted_proxy``: the address of the TLS-terminating proxy in front,
    whose ``X-Forwarded-Proto`` is believed (then cookies are ``Secure``);
    from anyone else the header is dropped.
    """
    from waitress.server import create_server  # noqa: PLC0415 - only when serving

    proxy: dict[str, Any] = (
        {"trusted_proxy": trusted_proxy, "trusted_proxy_headers": {"x-forwarded-proto"}}
        if trusted_proxy
        else {}
    )
    server = create_server(
        app,
        host=host,
        port=port,
        threads=threads,
        clear_untrusted_proxy_headers=True,
        # Refused before it is read, not buffered to disk first (waitress'
        # own limit is 1 GiB); the door refuses anything over its smaller one.
        max_request_body_size=4 * MAX_BODY_BYTES,
        # Answered 431 past it (waitress' own limit is 256 KiB of headers).
        max_request_header_size=MAX_HEADER_BYTES,
        **proxy,
    )
    stopping = threading.Event()

    def stop(signum: int, frame: object) -> None:
        del signum, frame
        stopping.set()
        server.close()

    # Before anyone hears "listening": a stop sent as soon as the line is read
    # must end the server cleanly, not by the signal's default action.
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        bound_host, bound_port = _address(server)
        if ready is not None:
            ready(bound_host, bound_port)
        log.info("web_listening", host=bound_host, port=bound_port)
        if not stopping.is_set():
            server.run()
    except OSError:
        if not stopping.is_set():
            raise  # closed under the loop by stop(); anything else is real
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _address(server: Any) -> tuple[str, int]:
    return str(server.effective_host), int(server.effective_port)
