"""
The database.

The engine's handle on one, its URLs, and an application's own tables and
named queries.  docs/applications.md explains them; docs/api.md lists them.
"""

from __future__ import annotations

from saga.core.store.backend import normalize_url
from saga.core.store.db import Database
from saga.core.store.sqlfiles import SqlComponent

__all__ = ["Database", "SqlComponent", "normalize_url"]
