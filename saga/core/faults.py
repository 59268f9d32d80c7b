"""
Named crash points for fault-injection tests.

``SAGA_CRASH_POINTS=request_payment.after_call`` makes a worker process die
(``os._exit``, no cleanup, like a kill) the first time it reaches that point,
so a test can prove recovery from the worst moment: after the provider
acted and before the engine recorded it.  Unset, a crash point costs one
dictionary lookup.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

_ENV: Final = "SAGA_CRASH_POINTS"
EXIT_CODE: Final = 137


def crash_point(name: str) -> None:
    """Die here if a test asked for it; each point fires once per marker file."""
    wanted = os.environ.get(_ENV)
    if not wanted or name not in wanted.split(","):
        return
    marker = os.environ.get("SAGA_CRASH_MARKER")
    if marker:
        path = Path(f"{marker}.{name}")
        if path.exists():
            return
        path.write_text(str(os.getpid()))
    os._exit(EXIT_CODE)
