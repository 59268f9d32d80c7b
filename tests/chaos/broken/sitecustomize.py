"""
The engine broken on purpose in every process of a test: ``$SAGA_BROKEN_VARIANT``.

Python imports ``sitecustomize`` at startup from the path; tests put this
folder on ``PYTHONPATH`` with ``SAGA_BROKEN_VARIANT`` naming one mutant of
:mod:`saga.purchase.chaos_mutants`, so that the command they run (pytest, or
``saga chaos``) and every process it starts run the broken engine.
``saga chaos --mutant NAME`` does the same for the harness and its workers
without this file.
"""

from __future__ import annotations

import os

VARIANT = os.environ.get("SAGA_BROKEN_VARIANT", "")

if VARIANT:
    from saga.purchase.chaos_mutants import apply

    apply(VARIANT)
