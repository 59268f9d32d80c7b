"""
Who may see and do what in the console: sign-in, sessions, CSRF, roles.

The browser holds a random session token in an ``HttpOnly``, ``SameSite=Strict``
cookie; the database keeps its hash, the operator, the session's CSRF token
and its expiry (:mod:`saga.core.ops.operators`).  Every form carries the CSRF
token and every POST checks it (the sign-in form against a cookie of its
own, a double submit); a POST without it is refused with 403 and changes
nothing.  Viewers read; only the ``operator`` role acts.
"""

from __future__ import annotations

import functools
import hmac
import secrets
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast
from urllib.parse import urlsplit

from flask import (
    Blueprint,
    current_app,
    g,
    redirect,
    render_template,
    request,
    url_for,
)

from saga.core.ops.operators import SESSION_LIFETIME_S, Operators, SignInThrottled

if TYPE_CHECKING:
    from collections.abc import Callable

    from werkzeug.wrappers import Response

SESSION_COOKIE: Final = "saga_session"
LOGIN_CSRF_COOKIE: Final = "saga_login_csrf"

F = TypeVar("F", bound="Callable[..., Any]")

blueprint = Blueprint("guard", __name__, template_folder="templates")


def operators() -> Operators:
    """The engine's operators."""
    return Operators(current_app.extensions["saga_engine"].db)


def load_session() -> None:
    """Before each console request: the signed-in operator's session, if any (``g.session``)."""
    console = request.blueprint in ("console", "guard")
    g.session = operators().session(request.cookies.get(SESSION_COOKIE)) if console else None


def signed_in(view: F) -> F:
    """Pages for signed-in operators; others go to the sign-in page."""

    @functools.wraps(view)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if g.session is None:
            return redirect(url_for("guard.sign_in", next=request.full_path))
        return view(*args, **kwargs)

    return cast("F", wrapped)


def acting(view: F) -> F:
    """A change: signed in, the session's CSRF token in the form, the ``operator`` role."""

    @functools.wraps(view)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if g.session is None:
            return refuse(401, "sign in first; nothing was changed")
        if not _same(request.form.get("csrf"), g.session.csrf):
            return refuse(403, "the form's CSRF token is missing or wrong; nothing was changed")
        if not g.session.operator.may_act:
            return refuse(
                403,
                f"{g.session.operator.name} is a viewer: viewers cannot act; nothing was changed",
            )
        return view(*args, **kwargs)

    return cast("F", wrapped)


def refuse(status: int, message: str) -> tuple[str, int]:
    """The error page."""
    return render_template("error.html", status=status, message=message), status


# Every response of the console: no framing (clickjacking), no inline script
# or style, forms post only here, no referrer leaking ids to other sites.
SECURITY_HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}


def secure_headers(response: Response) -> Response:
    """After every request: the security headers (kept if a view set its own)."""
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


@blueprint.get("/login")
def sign_in() -> Response | str:
    """The sign-in form, with a CSRF token of its own (a cookie and a field)."""
    token = secrets.token_urlsafe(32)
    page = current_app.make_response(
        render_template("login.html", csrf=token, next=_safe_next(request.args.get("next")))
    )
    page.set_cookie(LOGIN_CSRF_COOKIE, token, httponly=True, samesite="Strict", secure=_secure())
    return page


@blueprint.post("/login")
def sign_in_post() -> Response | tuple[str, int] | tuple[str, int, dict[str, str]]:
    """Check the password; on success a session cookie and the page asked for."""
    if not _same(request.form.get("csrf"), request.cookies.get(LOGIN_CSRF_COOKIE)):
        return refuse(403, "the sign-in form's CSRF token is missing or wrong; sign in again")
    try:
        signed = operators().sign_in(
            request.form.get("name", ""),
            request.form.get("password", ""),
            address=request.remote_addr,
        )
    except SignInThrottled as exc:
        page = render_template(
            "login.html",
            csrf=request.form.get("csrf"),
            next=_safe_next(request.form.get("next")),
            error=exc.message,
        )
        return page, 429, {"Retry-After": str(int(exc.retry_after_s))}
    if signed is None:
        page = render_template(
            "login.html",
            csrf=request.form.get("csrf"),
            next=_safe_next(request.form.get("next")),
            error="wrong name or password",
        )
        return page, 401
    token, _ = signed
    answer = redirect(_safe_next(request.form.get("next")) or url_for("console.overview"))
    answer.set_cookie(
        SESSION_COOKIE,
        token,
        max_age=int(SESSION_LIFETIME_S),
        httponly=True,
        samesite="Strict",
        secure=_secure(),
    )
    answer.delete_cookie(LOGIN_CSRF_COOKIE)
    return answer


@blueprint.post("/logout")
def sign_out() -> Response | tuple[str, int]:
    """End the session (with its CSRF token: a page elsewhere cannot sign you out)."""
    if g.session is not None and not _same(request.form.get("csrf"), g.session.csrf):
        return refuse(403, "the form's CSRF token is missing or wrong")
    operators().sign_out(request.cookies.get(SESSION_COOKIE))
    answer = redirect(url_for("guard.sign_in"))
    answer.delete_cookie(SESSION_COOKIE)
    return answer


def _same(given: str | None, expected: str | None) -> bool:
    # Bytes: compare_digest refuses str with characters outside ASCII.
    if not given or not expected:
        return False
    return hmac.compare_digest(str(given).encode(), str(expected).encode())


def _safe_next(target: str | None) -> str | None:
    """
    ``target`` if it is a path of this site, else ``None``: never an open redirect.

    Browsers drop tabs and line breaks inside a URL and read a backslash as a
    slash, so ``/<TAB>/evil.example`` would become ``//evil.example``: any of
    them refuses the target, as does anything with a scheme or a host.
    """
    if not target or not target.startswith("/") or target.startswith("//"):
        return None
    if any(ch in target for ch in "\\\t\r\n") or any(ord(ch) < 0x20 for ch in target):
        return None
    parts = urlsplit(target)
    if parts.scheme or parts.netloc:
        return None
    return target


def _secure() -> bool:
    return request.scheme == "https"
