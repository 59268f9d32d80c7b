"""
Prometheus metrics, through the standard client library (extra ``saga-engine[web]``).

Two kinds, because they come from two places:

* What a process does (jobs claimed, completed and failed by kind, claim and
  step latency, leases lost, transitions by kind and event, provider calls by
  outcome, webhooks by answer): counters and histograms in the process that
  does it.  ``saga worker`` runs several processes, so it switches the client
  to its multiprocess mode (a directory of per-process files) and its
  supervisor serves their sum.
* What the database holds (queue depth and oldest due age, expired leases,
  dead letters, the reconciliation backlog and its oldest age, sagas by kind
  and state, the outbox's backlog): read at scrape time by
  :class:`DatabaseCollector`, from the same queries as ``saga stats``, so the
  two always agree.

Nothing records until :func:`enable` runs (and the client library is only
imported then): until that, every recording call is a no-op.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import TYPE_CHECKING, Any, Final

from saga.core.logs import get_logger

if TYPE_CHECKING:
    from collections.abc import Iterator

    from saga.core.store.db import Database

log = get_logger(__name__)

MULTIPROC_ENV: Final = "PROMETHEUS_MULTIPROC_DIR"
# Latencies from a millisecond (a claim on an idle database) to a minute (a
# step waiting on a slow provider).
_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class _Metric:
    """
    A metric that records once :func:`enable` ran, and costs nothing before.

    The client library is imported only then: ``saga --help`` and the light
    commands never load it.
    """

    __slots__ = ("_real", "buckets", "doc", "kind", "labelnames", "name")

    def __init__(self, kind: str, name: str, doc: str, labelnames: tuple[str, ...] = ()) -> None:
        self.kind = kind
        self.name = name
        self.doc = doc
        self.labelnames = labelnames
        self._real: Any = None

    def labels(self, *values: str) -> Any:
        """The child for these label values (one that records nothing, while disabled)."""
        # Never itself: enable() between labels() and inc() would then call
        # the real parent without its labels, which raises.
        return _NOTHING if self._real is None else self._real.labels(*values)

    def inc(self, amount: float = 1) -> None:
        """Add ``amount`` (a counter)."""
        if self._real is not None:
            self._real.inc(amount)

    def observe(self, amount: float) -> None:
        """Record one observation (a histogram)."""
        if self._real is not None:
            self._real.observe(amount)

    def create(self) -> Any:
        """The client library's metric (once)."""
        if self._real is None:
            import prometheus_client  # noqa: PLC0415 - only when metrics are wanted

            if self.kind == "counter":
                self._real = prometheus_client.Counter(self.name, self.doc, self.labelnames)
            else:
                self._real = prometheus_client.Histogram(
                    self.name, self.doc, self.labelnames, buckets=_BUCKETS
                )
        return self._real


class _Nothing:
    """A labelled child of a disabled metric: records nothing."""

    def inc(self, amount: float = 1) -> None:
        """Nothing."""
        del amount

    def observe(self, amount: float) -> None:
        """Nothing."""
        del amount


_NOTHING: Final = _Nothing()


def _counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> _Metric:
    return _Metric("counter", name, doc, labels)


def _histogram(name: str, doc: str, labels: tuple[str, ...] = ()) -> _Metric:
    return _Metric("histogram", name, doc, labels)


JOBS_CLAIMED = _counter("saga_jobs_claimed", "Jobs claimed by workers.", ("kind",))
JOBS_COMPLETED = _counter("saga_jobs_completed", "Jobs completed (fenced).", ("kind",))
JOBS_FAILED = _counter(
    "saga_jobs_failed",
    "Failed attempts by error class and what followed (retried, dead_lettered, handed_over).",
    ("kind", "error_class", "then"),
)
CLAIM_SECONDS = _histogram("saga_claim_seconds", "Time to claim one batch of jobs.")
STEP_SECONDS = _histogram(
    "saga_step_seconds", "Time from a job's start to its settlement.", ("kind",)
)
LEASES_LOST = _counter(
    "saga_leases_lost", "Writes refused because the worker's lease had expired or passed on."
)
TRANSITIONS = _counter(
    "saga_transitions", "Saga transitions committed, by kind and event.", ("kind", "event")
)
PROVIDER_CALLS = _counter(
    "saga_provider_calls",
    "Calls to an external provider by operation and outcome (ok, refused, unknown, error).",
    ("operation", "outcome"),
)
WEBHOOKS = _counter(
    "saga_webhooks", "Webhook requests by provider and answer.", ("provider", "status")
)


def record_provider_call(operation: str, outcome: str) -> None:
    """Count one call to an external provider (see :class:`steps.ObservedProvider`)."""
    PROVIDER_CALLS.labels(operation, outcome).inc()


class DatabaseCollector:
    """The database's figures, read at each scrape (the queries of ``saga stats``)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def collect(self) -> Iterator[Any]:
        """Gauges from one read-only transaction; ``saga_database_up 0`` if it failed."""
        from prometheus_client.core import GaugeMetricFamily  # noqa: PLC0415

        from saga.core.ops.stats import collect as collect_stats  # noqa: PLC0415
        from saga.exceptions import DatabaseError  # noqa: PLC0415

        up = GaugeMetricFamily("saga_database_up", "Whether the last scrape read the database.")
        try:
            stats = collect_stats(self.db)
        except DatabaseError as exc:
            log.warning("metrics_database_unavailable", error=exc.message)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from _queue_families(stats["queues"])
        yield from _saga_families(stats["saga_kinds"])
        recon = stats["reconciliation"]
        yield _gauge("saga_reconciliation_open", "Open reconciliation items.", recon["open"])
        yield _gauge(
            "saga_reconciliation_oldest_age_seconds",
            "Age of the oldest open reconciliation item.",
            recon["oldest_age_s"],
        )
        yield _gauge(
            "saga_reconciliation_overdue", "Open items past their deadline.", recon["overdue"]
        )
        outbox = stats["outbox"]
        yield _gauge("saga_outbox_unpublished", "Events not yet published.", outbox["unpublished"])
        yield _gauge(
            "saga_outbox_oldest_unpublished_age_seconds",
            "Age of the oldest unpublished event.",
            outbox["oldest_unpublished_age_s"],
        )
        yield _gauge("saga_outbox_dead", "Events dead-lettered by the relay.", outbox["dead"])

    def describe(self) -> list[Any]:
        """Nothing up front: the registry must not scrape the database to register it."""
        return []


def _gauge(name: str, doc: str, value: float) -> Any:
    from prometheus_client.core import GaugeMetricFamily  # noqa: PLC0415

    return GaugeMetricFamily(name, doc, value=value)


def _queue_families(queues: dict[str, dict[str, Any]]) -> Iterator[Any]:
    from prometheus_client.core import GaugeMetricFamily  # noqa: PLC0415

    jobs = GaugeMetricFamily(
        "saga_queue_jobs",
        "Jobs by queue and state (pending, due, running, failed).",
        labels=["queue", "state"],
    )
    expired = GaugeMetricFamily(
        "saga_queue_expired_leases", "Running jobs whose lease has expired.", labels=["queue"]
    )
    oldest = GaugeMetricFamily(
        "saga_queue_oldest_due_age_seconds",
        "How long the oldest due job has waited.",
        labels=["queue"],
    )
    for name, figures in queues.items():
        for state in ("pending", "due", "running", "failed"):
            jobs.add_metric([name, state], figures[state])
        expired.add_metric([name], figures["expired_leases"])
        oldest.add_metric([name], figures["oldest_pending_age_s"])
    yield from (jobs, expired, oldest)


def _saga_families(kinds: dict[str, dict[str, Any]]) -> Iterator[Any]:
    from prometheus_client.core import GaugeMetricFamily  # noqa: PLC0415

    count = GaugeMetricFamily("saga_sagas", "Sagas by kind and state.", labels=["kind", "state"])
    oldest = GaugeMetricFamily(
        "saga_oldest_in_state_seconds",
        "How long the oldest saga of a kind has been in its state.",
        labels=["kind", "state"],
    )
    for kind, states in kinds.items():
        for state, figures in states.items():
            count.add_metric([kind, state], figures["count"])
            oldest.add_metric([kind, state], figures["oldest_in_state_s"])
    yield from (count, oldest)


def registry_for(db: Database) -> Any:
    """A registry of the database's figures and this process's counters (or every worker's)."""
    from prometheus_client import CollectorRegistry, multiprocess  # noqa: PLC0415

    registry = CollectorRegistry(auto_describe=False)
    if os.environ.get(MULTIPROC_ENV):
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        for collector in _own_collectors():
            registry.register(collector)
    registry.register(DatabaseCollector(db))
    return registry


_ALL: Final = (
    JOBS_CLAIMED,
    JOBS_COMPLETED,
    JOBS_FAILED,
    CLAIM_SECONDS,
    STEP_SECONDS,
    LEASES_LOST,
    TRANSITIONS,
    PROVIDER_CALLS,
    WEBHOOKS,
)


def enable() -> bool:
    """
    Start recording in this process; whether the client library is installed.

    ``saga worker --metrics-port`` calls it in every worker process (after
    setting ``$PROMETHEUS_MULTIPROC_DIR``) and the web server in its own.
    """
    try:
        import prometheus_client  # noqa: F401, PLC0415
    except ImportError:
        return False
    for metric in _ALL:
        metric.create()
    return True


def _own_collectors() -> list[Any]:
    return [metric.create() for metric in _ALL]


class MetricsServer:
    """
    ``/metrics`` on a port of its own, for ``saga worker``.

    It serves every worker process's counters (multiprocess mode, in a
    directory made here) and the database's figures.  Create it before the
    worker processes start: it sets ``$PROMETHEUS_MULTIPROC_DIR``, which
    they inherit.
    """

    def __init__(self, db: Database, *, host: str, port: int) -> None:
        from prometheus_client import start_http_server  # noqa: PLC0415

        self._dir = tempfile.mkdtemp(prefix="saga-metrics-")
        self._previous = os.environ.get(MULTIPROC_ENV)
        os.environ[MULTIPROC_ENV] = self._dir
        self._server, self._thread = start_http_server(port, addr=host, registry=registry_for(db))
        self.host, self.port = str(self._server.server_address[0]), int(self._server.server_port)

    def close(self) -> None:
        """Stop serving and remove the per-process files."""
        self._server.shutdown()
        self._server.server_close()
        if self._previous is None:
            os.environ.pop(MULTIPROC_ENV, None)
        else:
            os.environ[MULTIPROC_ENV] = self._previous
        shutil.rmtree(self._dir, ignore_errors=True)
