"""``saga webhook serve``: the HTTP door for signed provider webhooks."""

from __future__ import annotations

import os
import re
import sys
from typing import TYPE_CHECKING, Final

from saga.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    Output,
    add_common_options,
    open_engine,
    port_number,
    positive_float,
    whole,
)
from saga.exceptions import InvalidInput

if TYPE_CHECKING:
    import argparse

FLAGS: Final = {
    "secret": "--secret",
    "port": "--port",
    "host": "--host",
    "tolerance": "--tolerance",
    "threads": "--threads",
}
SECRET_ENV_PREFIX: Final = "SAGA_WEBHOOK_SECRET_"  # noqa: S105 - a variable name, not a secret


def add_serve_parser(hooks: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``webhook serve`` under ``webhook``."""
    serve = hooks.add_parser(
        "serve",
        help="take signed webhooks over HTTP: POST /webhooks/<provider>",
        description="Serve POST /webhooks/<provider>: the body's signature (header "
        "Saga-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of '<t>.<body>'>) is checked "
        "with the provider's secret before anything is stored. Answers: 200 delivered "
        "(or a duplicate), 400 unsigned/mis-signed/stale/malformed (recorded, nothing "
        "changed), 404 unknown provider or no purchase knows the payment yet (kept; send it "
        "again), 409 the event id came before with other content, 503 try again later. "
        f"Secrets come from ${SECRET_ENV_PREFIX}<PROVIDER> (e.g. "
        f"{SECRET_ENV_PREFIX}SANDBOX) or --secret.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    serve.add_argument(
        "--port", type=port_number, default=8080, metavar="N", help="port (8080; 0 picks one)"
    )
    serve.add_argument(
        "--secret",
        action="append",
        default=[],
        metavar="PROVIDER=SECRET",
        help="a provider's signing secret; twice for one provider while rotating. Visible to "
        f"other users in the process list: prefer ${SECRET_ENV_PREFIX}<PROVIDER>",
    )
    serve.add_argument(
        "--tolerance",
        type=positive_float,
        default=300.0,
        metavar="S",
        help="how far a signed timestamp may be from the database clock (300 s)",
    )
    serve.add_argument("--threads", type=whole, default=4, metavar="N", help="request threads (4)")
    add_common_options(serve, top_level=False)


def serve_command(args: argparse.Namespace, out: Output) -> int:
    """Run the door until SIGTERM or SIGINT."""
    secrets = _secrets(args.secret, os.environ)
    if args.threads < 1:
        raise InvalidInput(field="threads", problem="must be at least 1")
    try:
        from saga.web import create_app, serve
    except ImportError as exc:
        out.error(f"saga webhook serve needs the web extra: pip install 'saga-engine[web]' ({exc})")
        return EXIT_ERROR
    from saga.core.webhooks import WebhookDoor

    with open_engine(args, create=False) as engine:
        door = WebhookDoor(engine, secrets, tolerance_s=args.tolerance)

        def ready(host: str, port: int) -> None:
            # On stderr, first, so a supervisor or a test knows where to send.
            print(f"saga webhook serve: listening on http://{host}:{port}", file=sys.stderr)
            sys.stderr.flush()

        serve(create_app(door), host=args.host, port=args.port, threads=args.threads, ready=ready)
    out.line("saga webhook serve: stopped")
    return EXIT_OK


def _secrets(
    given: list[str], env: os._Environ[str] | dict[str, str]
) -> dict[str, tuple[str, ...]]:
    found: dict[str, list[str]] = {}
    for name, value in env.items():
        if name.startswith(SECRET_ENV_PREFIX) and value:
            found.setdefault(name[len(SECRET_ENV_PREFIX) :].lower(), []).append(value)
    for item in given:
        provider, sep, secret = item.partition("=")
        if not sep or not re.fullmatch(r"[a-z][a-z0-9_-]{0,63}", provider) or not secret:
            raise InvalidInput(
                field="secret", problem=f"{item.split('=')[0]!r}...: expected PROVIDER=SECRET"
            )
        found.setdefault(provider, []).append(secret)
    return {provider: tuple(secrets) for provider, secrets in found.items()}
