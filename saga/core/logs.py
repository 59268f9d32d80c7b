"""Where the engine's structured logs go when it runs as a command."""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(level: str) -> None:
    """Send structlog's events to stderr, so that stdout stays clean for ``--json``."""
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
