"""
Prometheus metrics: ``saga worker --metrics-port`` and the web server's ``/metrics``.

Scrapes are parsed with the client library's own parser.  The database's
figures must equal ``saga stats``; the workers' counters must equal what the
database says they did (jobs done, transitions, provider calls).
"""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
import time

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from saga import Engine, fire_in
from saga.core import metrics
from saga.core.messages.webhooks import WebhookDoor
from saga.core.ops.stats import collect
from saga.web import create_app
from tests import schemas
from tests.counter_app import app as counter_app
from tests.helpers import scalar
from tests.purchases import settle


@pytest.fixture
def shop(engine):
    engine.services.catalogue.add("js", seats=30, price="49.00", currency="EUR")
    return engine


def url_of(engine):
    return engine.db.url.render_as_string(hide_password=False)


def buy(shop, n, methods=("pm_ok", "pm_declined", "pm_timeout_after_charge"), first=0):
    for i in range(first, first + n):
        shop.services.purchases.start(
            operation_id=f"op-{i}",
            intensive_id="js",
            student_id=f"s-{i}",
            payment_method=methods[i % len(methods)],
            hold_seconds=600,
        )


def samples(text):
    """{(name, frozenset(labels)): value} of one scrape."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def total(scrape, name, **labels):
    """The sum of ``name``'s samples whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(value for (n, have), value in scrape.items() if n == name and wanted <= have)


@pytest.mark.slow
def test_the_databases_figures_equal_saga_stats(shop):
    """Queue depth, sagas by kind and state, the reconciliation backlog: as stats says."""
    buy(shop, 9)
    settle(url_of(shop))
    buy(shop, 4, first=100)  # waiting in the queue
    client = create_app(shop, door=WebhookDoor(shop, {"sandbox": ("s",)})).test_client()
    scrape = samples(client.get("/metrics").get_data(as_text=True))
    stats = collect(shop.db)
    assert 1 == scrape[("saga_database_up", frozenset())]
    for queue, figures in stats["queues"].items():
        for state in ("pending", "due", "running", "failed"):
            key = ("saga_queue_jobs", frozenset({("queue", queue), ("state", state)}))
            assert figures[state] == scrape[key], (queue, state)
    for kind, states in stats["saga_kinds"].items():
        for state, figures in states.items():
            key = ("saga_sagas", frozenset({("kind", kind), ("state", state)}))
            assert figures["count"] == scrape[key]
    assert stats["reconciliation"]["open"] == scrape[("saga_reconciliation_open", frozenset())]
    assert len(stats["saga_kinds"]["purchase"]) > 1  # several states to compare
    pending = sum(q["pending"] for q in stats["queues"].values())
    assert pending == total(scrape, "saga_queue_jobs", state="pending") >= 4


def test_a_database_that_cannot_be_read_is_a_zero_not_a_failed_scrape():
    """The scrape still answers, with saga_database_up 0, when the database is away."""
    from saga.core.store.db import Database

    db = Database("postgresql://postgres@127.0.0.1:1/nowhere")
    try:
        families = list(metrics.DatabaseCollector(db).collect())
    finally:
        db.dispose()
    assert [("saga_database_up", 0)] == [(f.name, f.samples[0].value) for f in families]


def test_webhook_answers_are_counted_by_provider_and_status(shop):
    """Each request to the door is counted under its answer."""
    client = create_app(shop, door=WebhookDoor(shop, {"sandbox": ("s",)})).test_client()
    before = samples(client.get("/metrics").get_data(as_text=True))
    for _ in range(3):
        client.post("/webhooks/sandbox", data=b"{}")  # unsigned: 400
    client.post("/webhooks/elsewhere", data=b"{}")  # unknown: 404
    after = samples(client.get("/metrics").get_data(as_text=True))

    def grew(**labels):
        return total(after, "saga_webhooks_total", **labels) - total(
            before, "saga_webhooks_total", **labels
        )

    assert (3, 1) == (grew(provider="sandbox", status="400"), grew(provider="other", status="404"))


def test_a_transition_is_counted_once_committed_and_never_when_rolled_back(db_url):
    """The counter moves after the commit: a transaction that rolls back counts nothing."""
    metrics.enable()
    with Engine(db_url, app=counter_app(), check_schema=False) as setup:
        schemas.migrate(setup)
    with Engine(db_url, app=counter_app()) as counters:
        saga = counters.sagas.start("counter", operation_id="c-1", request={}).saga

        def ticks():
            labels = {"kind": "counter", "event": "tick"}
            return REGISTRY.get_sample_value("saga_transitions_total", labels) or 0

        before = ticks()
        counters.sagas.fire(saga.id, "tick", actor="test")
        assert before + 1 == ticks()

        class Abort(Exception):
            pass

        def tick_then_fail(tx):
            fire_in(tx, counters.registry, saga.id, "tick", payload={}, actor="test", cause=None)
            raise Abort

        with pytest.raises(Abort):
            counters.db.transaction(tick_then_fail)
        assert before + 1 == ticks()
        assert 2 == counters.sagas.get(saga.id).version


def test_metrics_cost_nothing_until_enabled():
    """The light commands never import the client library."""
    code = (
        "import sys, saga.core.sagas.transitions, saga.core.workers.worker, saga.core.metrics as m;"
        "m.TRANSITIONS.labels('k', 'e').inc();"
        "assert 'prometheus_client' not in sys.modules, 'imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def scrape_worker(host, port):
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("GET", "/metrics")
        response = connection.getresponse()
        assert 200 == response.status
        return samples(response.read().decode())
    finally:
        connection.close()


@pytest.mark.slow
def test_saga_workers_counters_add_up_across_processes_to_what_the_database_holds(shop):
    """Two worker processes: jobs, transitions and provider calls summed equal the records."""
    buy(shop, 12)
    url = url_of(shop)
    command = [
        *(sys.executable, "-m", "saga", "worker", "--concurrency", "2", "--db", url),
        *(
            "--sandbox-db",
            shop.services.sandbox_url,
            "--metrics-port",
            "0",
            "--poll-interval",
            "0.2",
        ),
        *("--log-level", "error"),
    ]
    with subprocess.Popen(
        command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=os.environ
    ) as workers:
        try:
            first = workers.stderr.readline()
            assert first.startswith("saga worker: metrics on http://127.0.0.1:"), first
            host, port = first.split()[-1].removeprefix("http://").split("/")[0].split(":")
            deadline = time.monotonic() + 240
            while True:
                scrape = scrape_worker(host, port)
                done = scalar(shop, "SELECT count(*) FROM job_archive WHERE state = 'done'")
                transitions = scalar(
                    shop, "SELECT count(*) FROM saga_transitions WHERE event <> 'start'"
                )
                settled = scalar(
                    shop,
                    "SELECT count(*) FROM sagas WHERE state NOT IN ('reserved', 'payment_pending')",
                )
                if (
                    settled == 12
                    # An unknown outcome handed over to its saga is archived as done too.
                    and total(scrape, "saga_jobs_completed_total")
                    + total(scrape, "saga_jobs_failed_total", then="handed_over")
                    == done
                    and total(scrape, "saga_transitions_total") == transitions
                ):
                    break
                assert time.monotonic() < deadline, (
                    (settled, done, transitions),
                    total(scrape, "saga_jobs_completed_total"),
                    total(scrape, "saga_transitions_total"),
                )
                time.sleep(0.2)
        finally:
            workers.send_signal(signal.SIGTERM)
            assert 0 == workers.wait(timeout=60)
    payments = scalar(shop, "SELECT count(*) FROM payments")
    creates = total(scrape, "saga_provider_calls_total", operation="create_payment")
    assert payments == creates
    assert 4 == total(
        scrape, "saga_provider_calls_total", operation="create_payment", outcome="unknown"
    )
    assert total(scrape, "saga_jobs_claimed_total") >= total(scrape, "saga_jobs_completed_total")
    assert total(scrape, "saga_claim_seconds_count") > 0
    assert 0 == total(scrape, "saga_leases_lost_total")
    assert 1 == scrape[("saga_database_up", frozenset())]
