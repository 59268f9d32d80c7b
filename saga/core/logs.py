"""
Where the engine's structured logs go, and loggers that load structlog only when used.

A command that logs nothing (``saga stats``, ``saga instances show``) never
imports structlog and what it brings (asyncio): a tenth of its start-up.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any

_lock = threading.Lock()
_pending_level: str | None = None


def configure_logging(level: str) -> None:
    """
    Send structlog's events to stderr, so that stdout stays clean for ``--json``.

    Applied at once if structlog is loaded, else when the first event is logged.
    """
    global _pending_level  # noqa: PLW0603 - one process-wide setting, as structlog's own
    with _lock:
        _pending_level = level
    if "structlog" in sys.modules:
        _structlog()


def _structlog() -> Any:
    """structlog, configured as :func:`configure_logging` asked (the first time it is needed)."""
    global _pending_level
    import structlog  # noqa: PLC0415 - the point of this module

    # Under the lock to the end: a second thread must not log before the
    # configuration is in place (structlog's defaults print to stdout).
    with _lock:
        level, _pending_level = _pending_level, None
        if level is None:
            return structlog
        structlog.configure(
            processors=[
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                structlog.dev.ConsoleRenderer(colors=False),
            ],
            wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
            logger_factory=structlog.PrintLoggerFactory(sys.stderr),
            cache_logger_on_first_use=False,
        )
        return structlog


class _LazyLogger:
    """A structlog logger made on its first use (``log.info(...)``, ``log.bind(...)``)."""

    __slots__ = ("_logger", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._logger: Any = None

    def __getattr__(self, attr: str) -> Any:
        logger = self._logger
        if logger is None:
            logger = self._logger = _structlog().get_logger(self._name)
        return getattr(logger, attr)


def get_logger(name: str) -> Any:
    """A structured logger named ``name`` that loads structlog when it first logs."""
    return _LazyLogger(name)
