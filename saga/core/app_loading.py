"""
Loading an application by name: ``--app MODULE:NAME``, ``$SAGA_APP``, or the default.

Apart from the application's value (:mod:`saga.core.app`): this is the
command line's and the worker processes' way in, with its own refusals
(a name that is no application, a module that cannot be imported) and the
user's traceback, less this module's frames, when their code raises.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any, Final

from saga import settings
from saga.core.app import Application
from saga.exceptions import ApplicationLoadFailed, InvalidInput

APP_ENV: Final = "SAGA_APP"


def default_app() -> Application:
    """The application run without ``--app`` or ``$SAGA_APP``: :data:`saga.settings.DEFAULT_APP`."""
    return load_app(settings.DEFAULT_APP)


def load_app(spec: str | None = None) -> Application:
    """
    The application ``MODULE:NAME`` (default ``$SAGA_APP``, else :func:`default_app`).

    ``NAME`` is an :class:`Application`, or a function of no arguments
    returning one.  ``MODULE`` is looked up like ``python -m`` does, the working directory
    included.  Anything else is :class:`~saga.exceptions.InvalidInput` on
    ``app``; an error raised by the user's module or factory is
    :class:`~saga.exceptions.ApplicationLoadFailed`, with its traceback.
    """
    spec = spec if spec is not None else os.environ.get(APP_ENV) or None
    if spec is None:
        return default_app()
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise InvalidInput(field="app", problem=f"expected MODULE:NAME, got {spec!r}")
    found: Any = getattr(_import(spec, module_name), attribute, _MISSING)
    if found is _MISSING:
        raise InvalidInput(field="app", problem=f"module {module_name!r} has no {attribute!r}")
    if isinstance(found, Application):
        return found
    _check_factory(spec, found)
    try:
        made = found()
    except Exception as exc:
        raise _load_failed(spec, exc) from exc
    if not isinstance(made, Application):
        raise InvalidInput(
            field="app", problem=f"{spec!r} returned {_describe(made)}, not an Application"
        )
    return made


_MISSING: Final = object()
_NOT_AN_APP: Final = "not an Application or a function returning one"


def _import(spec: str, module_name: str) -> ModuleType:
    _search_working_directory()
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        # The module itself (or its package) is missing: a typo, a wrong
        # directory.  A module *it* imports that is missing is its own bug.
        if exc.name is not None and (module_name + ".").startswith(exc.name + "."):
            raise InvalidInput(
                field="app",
                problem=f"cannot import {module_name!r}: {exc} (looked in the installed "
                f"packages and in the working directory, {Path.cwd()})",
            ) from exc
        raise _load_failed(spec, exc) from exc
    except Exception as exc:  # the user's module raised as it was imported
        raise _load_failed(spec, exc) from exc


def _search_working_directory() -> None:
    """
    Put the working directory on ``sys.path``, as ``python -m``, uvicorn and Celery do.

    Appended, not prepended: an installed package keeps its name, and a file
    of the working directory cannot shadow a module the engine imports later.
    """
    here = str(Path.cwd())
    if here not in sys.path and "" not in sys.path:
        sys.path.append(here)


def _check_factory(spec: str, found: object) -> None:
    """Refuse what is no function of the user's taking no arguments (an application factory)."""
    if isinstance(found, type):
        raise InvalidInput(
            field="app",
            problem=f"{spec!r} is the class {found.__module__}.{found.__qualname__}, {_NOT_AN_APP}",
        )
    if not callable(found):
        raise InvalidInput(field="app", problem=f"{spec!r} is {_describe(found)}, {_NOT_AN_APP}")
    # Only the user's own Python code: `builtins:input` would be called too.
    code = found.func if isinstance(found, functools.partial) else found
    if not (inspect.isfunction(code) or inspect.ismethod(code)):
        raise InvalidInput(field="app", problem=f"{spec!r} is {_describe(found)}, {_NOT_AN_APP}")
    parameters = inspect.signature(found).parameters.values()
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    required = [p for p in parameters if p.default is inspect.Parameter.empty]
    if any(p.kind in positional or p.kind is inspect.Parameter.KEYWORD_ONLY for p in required):
        raise InvalidInput(
            field="app",
            problem=f"{spec!r} takes {len(required)} arguments: a function returning an "
            "Application takes none",
        )


def _describe(value: object) -> str:
    if inspect.isbuiltin(value) or inspect.isroutine(value):
        name = getattr(value, "__qualname__", getattr(value, "__name__", "?"))
        where = getattr(value, "__module__", None)
        return f"the function {where}.{name}" if where else f"the function {name}"
    if isinstance(value, ModuleType):
        return f"the module {value.__name__}"
    kind = type(value)
    where = "" if kind.__module__ == "builtins" else f"{kind.__module__}."
    return f"a value of type {where}{kind.__qualname__}"


def _load_failed(spec: str, exc: BaseException) -> ApplicationLoadFailed:
    """The user's error with its traceback, less the frames of this module and of importlib."""
    shown = traceback.TracebackException.from_exception(exc)
    ours = (__file__, importlib.__file__)
    shown.stack = traceback.StackSummary.from_list(
        [
            frame
            for frame in shown.stack
            if frame.filename not in ours and not frame.filename.startswith("<frozen importlib")
        ]
    )
    return ApplicationLoadFailed(
        spec=spec, error=f"{type(exc).__name__}: {exc}", traceback="".join(shown.format())
    )
