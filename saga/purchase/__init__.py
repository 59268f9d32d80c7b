"""
The purchase of a seat of a paid intensive: the engine's reference application.

It is built on the engine's public API (:mod:`saga`) the way any user's
application is, and loaded by default (``--app`` names another).
"""
