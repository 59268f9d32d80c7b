"""
The engine's HTTP face (extra ``saga-engine[web]``): signed webhooks into the inbox.

:func:`create_app` builds the WSGI application; ``saga webhook serve`` runs
it under waitress.  Nothing here decides anything: the door
(:class:`saga.core.messages.webhooks.WebhookDoor`) does, the same code path as the
CLI's ``saga webhook deliver``.
"""

from __future__ import annotations

from saga.web.app import create_app, serve

__all__ = ["create_app", "serve"]
