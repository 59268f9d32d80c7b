"""
Reconciliation of outcomes that are unknown.

Items with an owner, a next check and a limit; the automatic checker; the operators'
desk.
"""
