"""``saga webhook serve``, ``saga console`` and ``saga operator …``: the HTTP face."""

from __future__ import annotations

import getpass
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
from saga.codec import iso, maybe_utc
from saga.exceptions import InvalidInput

if TYPE_CHECKING:
    import argparse

FLAGS: Final = {
    "limit": "--limit",
    "name": "NAME",
    "role": "--role",
    "password": "password",
    "secret": "--secret",
    "port": "--port",
    "host": "--host",
    "tolerance": "--tolerance",
    "threads": "--threads",
    "outcome": "--outcome",
    "hours": "--hours",
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
        "changed), 404 unknown provider or no saga knows the event yet (kept; send it "
        "again), 409 the event id came before with other content, 503 try again later. "
        f"Secrets come from ${SECRET_ENV_PREFIX}<PROVIDER> (e.g. "
        f"{SECRET_ENV_PREFIX}ESIGN) or --secret.",
    )
    _server_options(serve, port=8080)
    refusals = hooks.add_parser(
        "refusals",
        help="requests refused at the door (bad signature, malformed, unknown)",
        description="The newest refused requests (the door keeps only the newest "
        "whole), or with --counts every refused request counted per hour, provider and "
        "reason.",
    )
    refusals.add_argument(
        "--limit", type=whole, default=50, metavar="N", help="newest N (default: 50)"
    )
    refusals.add_argument(
        "--counts",
        action="store_true",
        help="refused requests per hour, provider and reason instead of the newest ones",
    )
    refusals.add_argument(
        "--hours",
        type=whole,
        default=24,
        metavar="H",
        help="with --counts: the last H hours, this one included (default: 24)",
    )
    add_common_options(refusals, top_level=False)


def add_console_parsers(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    """Add ``console`` and ``operator add|list|disable``."""
    console = subparsers.add_parser(
        "console",
        help="the operators' console in the browser (and webhooks, /metrics)",
        description="Serve the operators' console: the reconciliation queue, dead letters, "
        "sagas and an overview, for operators signed in with `saga operator add`. Also "
        "serves GET /metrics, and POST /webhooks/<provider> for every provider with a "
        f"secret (${SECRET_ENV_PREFIX}<PROVIDER> or --secret). Binds 127.0.0.1 unless "
        "--host says otherwise.",
    )
    _server_options(console, port=8080)
    operator = subparsers.add_parser("operator", help="the console's operators")
    actions = operator.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = actions.add_parser(
        "add",
        help="create an operator (the password is read from stdin, or asked twice on a terminal)",
    )
    add.add_argument("name", metavar="NAME", help="the name they sign in with")
    add.add_argument(
        "--role",
        required=True,
        choices=("viewer", "operator"),
        help="viewer: reads only; operator: also acts (assigns, resolves, replays)",
    )
    add_common_options(add, top_level=False)
    listing = actions.add_parser("list", help="every operator and their role")
    add_common_options(listing, top_level=False)
    disable = actions.add_parser("disable", help="stop an operator signing in; ends their sessions")
    disable.add_argument("name", metavar="NAME", help="the operator's name")
    add_common_options(disable, top_level=False)
    sign_ins = actions.add_parser(
        "sign-ins",
        help="the console's sign-in attempts, newest first: accepted, refused (wrong name or "
        "password) and throttled (too many failures for the name or address)",
    )
    sign_ins.add_argument(
        "--outcome",
        choices=("accepted", "refused", "throttled", "pending"),
        help="only attempts with this outcome (default: every outcome)",
    )
    sign_ins.add_argument(
        "--limit", type=whole, default=50, metavar="N", help="newest N attempts (default: 50)"
    )
    add_common_options(sign_ins, top_level=False)


def _server_options(parser: argparse.ArgumentParser, *, port: int) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    parser.add_argument(
        "--port",
        type=port_number,
        default=port,
        metavar="N",
        help=f"port; 0 picks one (default: {port})",
    )
    parser.add_argument(
        "--secret",
        action="append",
        default=[],
        metavar="PROVIDER=SECRET",
        help="a provider's signing secret; twice for one provider while rotating. Visible to "
        f"other users in the process list: prefer ${SECRET_ENV_PREFIX}<PROVIDER>",
    )
    parser.add_argument(
        "--tolerance",
        type=positive_float,
        default=300.0,
        metavar="S",
        help="how far a signed timestamp may be from the database clock, in seconds (default: 300)",
    )
    parser.add_argument(
        "--threads", type=whole, default=4, metavar="N", help="request threads (default: 4)"
    )
    parser.add_argument(
        "--trusted-proxy",
        metavar="ADDRESS",
        help="the TLS-terminating proxy in front: its X-Forwarded-Proto is believed, so "
        "cookies are Secure behind https (from any other address the header is dropped)",
    )
    add_common_options(parser, top_level=False)


def serve_command(args: argparse.Namespace, out: Output) -> int:
    """``saga webhook serve``: the door alone, until SIGTERM or SIGINT."""
    return _serve(args, out, console=False, name="saga webhook serve")


def console_command(args: argparse.Namespace, out: Output) -> int:
    """``saga console``: the console, /metrics, and the door if a secret is given."""
    return _serve(args, out, console=True, name="saga console")


def _serve(args: argparse.Namespace, out: Output, *, console: bool, name: str) -> int:
    secrets = _secrets(args.secret, os.environ)
    if args.threads < 1:
        raise InvalidInput(field="threads", problem="must be at least 1")
    try:
        from saga.web import create_app, serve
    except ImportError as exc:
        out.error(f"{name} needs the web extra: pip install 'saga-engine[web]' ({exc})")
        return EXIT_ERROR
    from saga.core.messages.webhooks import WebhookDoor

    with open_engine(args, create=False) as engine:
        door = (
            WebhookDoor(engine, secrets, tolerance_s=args.tolerance)
            if secrets or not console
            else None
        )

        def ready(host: str, port: int) -> None:
            # On stderr, first, so a supervisor or a test knows where to send.
            print(f"{name}: listening on http://{host}:{port}", file=sys.stderr)
            sys.stderr.flush()

        app = create_app(engine, door=door, console=console)
        serve(
            app,
            host=args.host,
            port=args.port,
            threads=args.threads,
            trusted_proxy=args.trusted_proxy,
            ready=ready,
        )
    out.line(f"{name}: stopped")
    return EXIT_OK


def refusals_command(args: argparse.Namespace, out: Output) -> int:
    """``saga webhook refusals``: the newest refused requests, for a look at an attack or a typo."""
    if not 1 <= args.limit <= 10_000:
        raise InvalidInput(field="limit", problem="must be between 1 and 10000")
    if args.counts:
        return _refusal_counts(args, out)
    with open_engine(args, create=False) as engine:
        found = engine.db.transaction(
            lambda tx: tx.all("list_refusals", limit=args.limit), write=False
        )
    listed = [
        {
            "id": int(row["id"]),
            "source": row["source"],
            "reason": row["reason"],
            "detail": row["detail"],
            "body_digest": row["body_digest"],
            "body_excerpt": row["body_excerpt"],
            "remote": row["remote"],
            "received_at": iso(maybe_utc(row["received_at"])),
        }
        for row in found
    ]
    if out.as_json:
        out.json(listed)
    else:
        out.table(
            ("RECEIVED", "PROVIDER", "REASON", "FROM", "DETAIL"),
            (
                (r["received_at"], r["source"], r["reason"], r["remote"] or "", r["detail"][:70])
                for r in listed
            ),
        )
    return EXIT_OK


def _refusal_counts(args: argparse.Namespace, out: Output) -> int:
    """``saga webhook refusals --counts``: every refused request, per hour, provider and reason."""
    if not 1 <= args.hours <= 24 * 366:
        raise InvalidInput(field="hours", problem=f"must be between 1 and {24 * 366}")
    with open_engine(args, create=False) as engine:
        found = engine.db.transaction(
            lambda tx: tx.all("list_refusal_counts", hours=args.hours), write=False
        )
    listed = [
        {
            "hour": iso(maybe_utc(row["hour"])),
            "source": row["source"],
            "reason": row["reason"],
            "count": int(row["n"]),
            "bytes": int(row["bytes"]),
            "last_at": iso(maybe_utc(row["last_at"])),
        }
        for row in found
    ]
    if out.as_json:
        out.json(listed)
    else:
        out.table(
            ("HOUR", "PROVIDER", "REASON", "COUNT", "BYTES", "LAST"),
            (
                (r["hour"], r["source"], r["reason"], r["count"], r["bytes"], r["last_at"])
                for r in listed
            ),
        )
    return EXIT_OK


def operator_add(args: argparse.Namespace, out: Output) -> int:
    """``saga operator add NAME --role R``: the password from stdin or asked twice."""
    from saga.core.ops.operators import Operators

    password = _password(out)
    with open_engine(args, create=False) as engine:
        operator = Operators(engine.db).add(args.name, role=args.role, password=password)
    if out.as_json:
        out.json(operator.to_json())
    else:
        out.line(f"operator {operator.name} added ({operator.role})")
    return EXIT_OK


def operator_list(args: argparse.Namespace, out: Output) -> int:
    """``saga operator list``."""
    from saga.core.ops.operators import Operators

    with open_engine(args, create=False) as engine:
        found = Operators(engine.db).list()
    if out.as_json:
        out.json([operator.to_json() for operator in found])
    else:
        out.table(
            ("NAME", "ROLE", "DISABLED"),
            ((o.name, o.role, "yes" if o.disabled else "") for o in found),
        )
    return EXIT_OK


def operator_disable(args: argparse.Namespace, out: Output) -> int:
    """``saga operator disable NAME``."""
    from saga.core.ops.operators import Operators

    with open_engine(args, create=False) as engine:
        Operators(engine.db).disable(args.name)
    if out.as_json:
        out.json({"name": args.name, "disabled": True})
    else:
        out.line(f"operator {args.name} disabled; their sessions ended")
    return EXIT_OK


def operator_sign_ins(args: argparse.Namespace, out: Output) -> int:
    """``saga operator sign-ins``: the audit of console sign-ins (and of the throttle)."""
    from saga.core.ops.operators import Operators

    if not 1 <= args.limit <= 10_000:
        raise InvalidInput(field="limit", problem="must be between 1 and 10000")
    with open_engine(args, create=False) as engine:
        found = Operators(engine.db).attempts(outcome=args.outcome, limit=args.limit)
    listed = [
        {
            "operator": row["operator"],
            "address": row["address"],
            "outcome": row["outcome"],
            "attempts": int(row["attempts"]),
            "first_at": iso(maybe_utc(row["first_at"])),
            "last_at": iso(maybe_utc(row["last_at"])),
        }
        for row in found
    ]
    if out.as_json:
        out.json(listed)
    else:
        out.table(
            ("LAST", "NAME", "FROM", "OUTCOME", "ATTEMPTS"),
            (
                (r["last_at"], r["operator"], r["address"], r["outcome"], r["attempts"])
                for r in listed
            ),
        )
    return EXIT_OK


def _password(out: Output) -> str:
    if not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\n")
    first = getpass.getpass("password: ")
    if getpass.getpass("again: ") != first:
        raise InvalidInput(field="password", problem="the two entries differ; nothing was changed")
    del out
    return first


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
