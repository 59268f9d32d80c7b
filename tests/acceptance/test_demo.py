"""`saga demo`, the main job: purchases with faults, a report, the invariants green."""

from __future__ import annotations

import json

import pytest

from saga.cli import main


@pytest.mark.slow
def test_demo_settles_and_verifies(db_url, capsys):
    """A small demo run settles, reports every section, and `saga verify` is green."""
    code = main(
        ["demo", "--purchases", "80", "--workers", "2", "--seed", "11", "--db", db_url, "--json"]
    )
    report = json.loads(capsys.readouterr().out)
    assert 0 == code
    assert report["settled"]
    assert report["verify"]["ok"]
    purchases = report["purchases"]
    assert purchases["accepted"] + sum(purchases["refused"].values()) == 80
    assert sum(purchases["by_state"].values()) == purchases["accepted"]
    assert set(purchases["by_state"]) <= {
        "confirmed",
        "cancelled",
        "expired",
        "refunded",
        "needs_reconciliation",
    }
    assert {"charges", "refunds", "charged_minor", "refunded_minor"} <= set(report["money"])
    assert len(report["seats"]) == 4


def test_same_seed_draws_the_same_purchases():
    """--seed replays the same mix of purchases."""
    from saga.purchase.demo import Plan

    first = Plan.draw(purchases=200, seed=5, run="a")
    again = Plan.draw(purchases=200, seed=5, run="a")
    other = Plan.draw(purchases=200, seed=6, run="a")
    assert (first.purchases, first.cancel) == (again.purchases, again.cancel)
    assert first.purchases != other.purchases


def test_demo_rejects_bad_sizes(capsys, tmp_path):
    """--purchases 0 is bad input naming the field."""
    assert 2 == main(["demo", "--purchases", "0", "--db", f"sqlite:///{tmp_path}/d.db"])
    assert "--purchases" in capsys.readouterr().err


@pytest.mark.slow
def test_the_seed_alone_decides_where_each_purchase_ends(tmp_path, capsys):
    """Two runs of one seed end the same way, state by payment method, whatever the load."""
    reports = []
    for run in ("one", "two"):
        url = f"sqlite:///{tmp_path}/{run}.db"
        argv = ["demo", "--purchases", "60", "--workers", "2", "--seed", "3", "--db", url]
        assert 0 == main([*argv, "--json"])
        reports.append(json.loads(capsys.readouterr().out))
    first, second = (r["purchases"] for r in reports)
    assert first["by_payment_method"] == second["by_payment_method"]
    assert (first["refused"], first["by_state"]) == (second["refused"], second["by_state"])
    assert "expired" not in first["by_state"]  # no purchase lost its hold to a backlog
    lag = reports[0]["payment_request_lag_s"]
    assert lag["p50"] <= lag["p99"] <= lag["max"]
