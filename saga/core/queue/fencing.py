"""
Fencing an application's own transaction with a job's lease.

A step that writes in a transaction of its own (a payment intent before the
provider is called, say) keeps its writes only while its worker still owns
the job: :func:`fenced` runs the work and checks the lease last.  Apart from
:mod:`saga.core.queue.leases`: these are what an application's steps call,
not the queue's own operations on its jobs.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, TypeVar

from saga.exceptions import LeaseLost

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from saga.core.queue.values import Job
    from saga.core.store.db import Database, Tx

T = TypeVar("T")


def fence_in(tx: Tx, jobs: Sequence[Job]) -> set[str]:
    """
    Lock the jobs still owned under their tokens; the ids that are.

    Call it as the transaction's last statement (or use :func:`fenced`): a
    lease checked first can expire while the transaction waits on a lock or
    its process is paused, and writes made after that would commit under a
    lease nobody holds.  Checked last, under the job's row lock (which keeps
    a reclaim out until the commit) and with the heartbeat never reviving an
    expired lease, it vouches for every write before it.  Fencing one job
    makes the transaction that job's: ``tx.lease`` names it, so the saga and
    money writes record whose lease they were made under (see
    :attr:`saga.core.store.db.Tx.lease`).
    """
    items = json.dumps([{"id": job.id, "token": job.token} for job in jobs])
    owned = {row["id"] for row in tx.all("fence_jobs", items=items)}
    if len(jobs) == 1:
        tx.lease = (jobs[0].id, jobs[0].token)
    return owned


def fenced(db: Database, job: Job, work: Callable[[Tx], T]) -> T:
    """
    Run ``work`` in one transaction that keeps its writes only while ``job`` is owned.

    ``work`` runs first, with ``tx.lease`` naming the job; the lease is
    checked last (:func:`fence_in`).  If it was lost meanwhile the
    transaction rolls back and :class:`~saga.exceptions.LeaseLost` is raised.
    """

    def run(tx: Tx) -> T:
        tx.lease = (job.id, job.token)
        value = work(tx)
        if not fence_in(tx, [job]):
            raise LeaseLost(job_id=job.id)
        return value

    return db.transaction(run)
