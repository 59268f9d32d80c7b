"""steps.ObservedProvider: every call reported with its outcome, the rest passed through."""

from __future__ import annotations

import pytest

from steps import ObservedProvider, OutcomeUnknown, PermanentError, TransientError


class Provider:
    """Answers by key: ok, or one of the step errors."""

    def payment_status(self, *, key):
        errors = {
            "timeout": OutcomeUnknown("timed out"),
            "refused": PermanentError("refused"),
            "busy": TransientError("busy"),
            "bug": KeyError("bug"),
        }
        if key in errors:
            raise errors[key]
        return {"key": key}

    def ledger(self):
        return {"charges": []}


def test_each_call_is_recorded_with_its_outcome_and_the_answer_passes_through():
    seen = []
    provider = ObservedProvider(Provider(), lambda op, outcome: seen.append((op, outcome)))
    assert {"key": "k"} == provider.payment_status(key="k")
    for key, error in (
        ("timeout", OutcomeUnknown),
        ("refused", PermanentError),
        ("busy", TransientError),
        ("bug", KeyError),
    ):
        with pytest.raises(error):
            provider.payment_status(key=key)
    assert [
        ("payment_status", "ok"),
        ("payment_status", "unknown"),
        ("payment_status", "refused"),
        ("payment_status", "transient"),
        ("payment_status", "error"),
    ] == seen


def test_what_the_provider_offers_beyond_the_port_stays_reachable():
    """The sandbox's ledger, which verify compares the records with."""
    provider = ObservedProvider(Provider(), lambda op, outcome: None)
    assert {"charges": []} == provider.ledger()
