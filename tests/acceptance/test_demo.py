"""`saga demo`, the main job: purchases with faults, a report, the invariants green."""

from __future__ import annotations

import json

import pytest

from saga import Engine
from saga.cli import main
from saga.cli.common import Output
from saga.ops import collect_stats
from saga.purchase.cli.demo import _print, _print_left


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
    assert {"purchases": purchases["accepted"], "demo_runs": 1} == {
        key: report["database"][key] for key in ("purchases", "demo_runs")
    }
    # The workers stopped on a queue with nothing due: what is left is named, due later.
    assert all(job["first_due_in_s"] > 0 for job in report["left"]["jobs"])
    assert not [job for job in report["left"]["jobs"] if job["queue"] == "purchase"]
    with Engine(db_url) as engine:
        queues = collect_stats(engine.db)["queues"]
    assert {"purchase": 0} == {q: queues[q]["pending"] for q in queues if q == "purchase"}
    assert [] == [q for q, figures in queues.items() if figures["due"] or figures["running"]]

    # A second run on the same database: its own figures are its own, verify's are both runs'.
    code = main(
        ["demo", "--purchases", "30", "--workers", "2", "--seed", "12", "--db", db_url, "--json"]
    )
    second = json.loads(capsys.readouterr().out)
    assert 0 == code
    both = purchases["accepted"] + second["purchases"]["accepted"]
    assert sum(second["purchases"]["by_state"].values()) == second["purchases"]["accepted"]
    assert (both, 2) == (second["database"]["purchases"], second["database"]["demo_runs"])
    checked = {i["name"]: i["checked"] for i in second["verify"]["invariants"]}
    assert both == checked["seat_follows_state"]
    _print(Output(as_json=False), second)
    text = capsys.readouterr().out
    assert f"cover the whole database: {both} purchases, 2 demo runs" in text
    assert f"saga verify, the whole database ({both} purchases, 2 demo runs)" in text
    assert "left in the queue" in text


def test_same_seed_draws_the_same_purchases():
    """--seed replays the same mix of purchases."""
    from saga.purchase.demo_plan import Plan

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


def test_the_report_names_what_is_left_and_when_it_is_due(capsys):
    """Jobs left behind are listed by kind with when they are due; none, and it says so."""
    left = {
        "horizon_s": 60.0,
        "jobs": [
            {
                "queue": "reconciliation",
                "kind": "recon.deadline",
                "pending": 16,
                "first_due_in_s": 86390.2,
                "last_due_in_s": 86399.9,
                "what": "deadlines of reconciliation items waiting for an operator",
            },
            {
                "queue": "mail",
                "kind": "mail.send",
                "pending": 2,
                "first_due_in_s": 0.0,
                "last_due_in_s": 90.0,
                "what": "",
            },
        ],
    }
    _print_left(Output(as_json=False), left)
    _print_left(Output(as_json=False), {"horizon_s": 60.0, "jobs": []})
    text = capsys.readouterr().out
    assert "due within 60 s was worked before the workers stopped" in text
    assert (
        "16 recon.deadline           due in 24.0 h: deadlines of reconciliation items "
        "waiting for an operator"
    ) in text
    assert "2 mail.send                due now to 90 s\n" in text
    assert text.rstrip().endswith("left in the queue: nothing")
