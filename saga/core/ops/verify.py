"""
``saga verify``: every invariant of DESIGN.md §2, checked on the data.

Each check reads the engine's tables with named SQL queries (an
application's checks may ask the outside world too) and reports
how many things it checked and which of them break the rule.  ``ok`` only if
nothing does.  Run it at quiescence: it reads the engine and the provider
one after the other, not in one snapshot.

The engine's own invariants live here, for sagas of any kind; each
application adds its own (``Application.invariants``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Final

from saga.codec import as_utc, maybe_utc
from saga.core.messages.outbox import event_id
from saga.core.ops.invariants import Invariant, Report
from saga.core.sagas.plans import MIGRATED

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from datetime import datetime

    from sqlalchemy.engine import RowMapping

    from saga.core.engine import Engine
    from saga.core.sagas.registry import Registry
    from saga.core.store.db import Tx
    from state_machine import Machine

# Liveness: a saga that waits longer than twice its longest timeout is stuck
# (with a floor, so a busy worker's polling and backoff are not "stuck").
LIVENESS_FLOOR_S: Final = 60.0


def verify(engine: Engine) -> Report:
    """Check the application's invariants and the engine's on ``engine``'s database."""
    facts = engine.db.transaction(_engine_facts, write=False)
    facts["registry"] = engine.registry
    asked = _expected_jobs(
        engine.registry, facts["transitions"], facts["sagas"], facts["jobs_horizon"]
    )

    def known_now(tx: Tx) -> tuple[set[str], datetime | None]:
        return _known_jobs(tx, sorted(asked)), maybe_utc(
            tx.scalar("get_prune_horizon", target="jobs")
        )

    # A prune between the two reads may have removed jobs the first read
    # expected: ask only for those the newer horizon still covers.
    facts["known_jobs"], horizon = engine.db.transaction(known_now, write=False)
    facts["expected_jobs"] = (
        asked
        if horizon == facts["jobs_horizon"]
        else _expected_jobs(engine.registry, facts["transitions"], facts["sagas"], horizon)
    )
    checks: list[Callable[[dict[str, Any]], Invariant]] = [
        _no_lost_intent,
        _reconciliation,
        _fencing,
        _audit,
        _declared,
        _one_effect_per_event,
        _outbox,
        _liveness,
        _stat_counts,
    ]
    return Report([*engine.app.invariants(engine), *(check(facts) for check in checks)])


def _engine_facts(tx: Tx) -> dict[str, Any]:
    return {
        "without_operation": [row["id"] for row in tx.all("verify_sagas_without_operation")],
        "transitions": tx.all("verify_transitions", migrated=MIGRATED),
        "sagas": tx.all("verify_saga_versions"),
        "open_items": tx.all("verify_open_items"),
        "orphan_results": [row["job_id"] for row in tx.all("verify_orphan_results")],
        "dead_letters": tx.all("verify_dead_letters"),
        "inbox_effects": tx.all("verify_inbox_effects"),
        "outbox_events": {row["event_id"] for row in tx.all("verify_outbox_events")},
        "outbox_horizon": maybe_utc(tx.scalar("get_prune_horizon", target="outbox")),
        "jobs_horizon": maybe_utc(tx.scalar("get_prune_horizon", target="jobs")),
        "dead_events": tx.all("verify_dead_events"),
        "stat_counts": tx.all("verify_stat_counts"),
    }


def _known_jobs(tx: Tx, ids: list[str]) -> set[str]:
    known: set[str] = set()
    for start in range(0, len(ids), 500):
        chunk = json.dumps(ids[start : start + 500])
        known.update(row["id"] for row in tx.all("verify_known_jobs", ids=chunk))
    return known


def _machine(registry: Registry, kind: str, version: int) -> Machine | None:
    try:
        return registry.get(kind, version).machine
    except LookupError:
        return None


def _retired(registry: Registry, kind: str, version: int) -> bool:
    """
    Whether ``version`` of ``kind`` is older than one the application registers, and gone.

    Its history stays (finished sagas, transitions made before a migration),
    with no definition left to read it by: the application check refused
    retiring it while it had live sagas, which is what matters.
    """
    versions = [t.machine.version for t in registry if t.machine.name == kind]
    return bool(versions) and version < max(versions) and version not in versions


def _expected_jobs(
    registry: Registry,
    transitions: Iterable[RowMapping],
    sagas: Iterable[RowMapping],
    horizon: datetime | None,
) -> dict[str, str]:
    """
    Every job a saga's history queued: the actions of each state it entered, its timer.

    Jobs of transitions before retention's ``horizon`` may have been pruned
    once finished: they are not asked for.
    """
    expected: dict[str, str] = {}
    old: set[str] = set()  # sagas whose latest transition is before the horizon
    for row in transitions:
        if horizon is not None and as_utc(row["at"]) < horizon:
            old.add(row["saga_id"])
            continue
        old.discard(row["saga_id"])
        machine = _machine(registry, row["kind"], int(row["definition_version"]))
        if machine is None or not machine.has_state(row["to_state"]):
            continue
        # A migration queued the actions still due, and says which.
        actions = (
            json.loads(row["queued"] or "[]")
            if row["event"] == MIGRATED
            else machine.state(row["to_state"]).actions
        )
        for action in actions:
            job = f"step:{row['saga_id']}:{row['version']}:{action}"
            expected[job] = f"{row['saga_id']} entered {row['to_state']} (v{row['version']})"
    for saga in sagas:
        if saga["deadline_event"] is not None and saga["id"] not in old:
            job = f"timer:{saga['id']}:{saga['version']}"
            expected[job] = f"{saga['id']} has a deadline at v{saga['version']}"
    return expected


def _no_lost_intent(facts: dict[str, Any]) -> Invariant:
    rule = Invariant(
        "no_lost_intent",
        "every saga has its accepting operation, and every step and timer it queued",
    )
    for saga_id in facts["without_operation"]:
        rule.check(False, f"saga {saga_id} has no operation id")
    for job, why in sorted(facts["expected_jobs"].items()):
        rule.check(job in facts["known_jobs"], f"job {job} is missing ({why})")
    return rule


def _reconciliation(facts: dict[str, Any]) -> Invariant:
    rule = Invariant(
        "reconciliation_visible",
        "every saga in needs_reconciliation has exactly one open outcome item, no other saga "
        "has one, and every open item has an owner and a next check",
    )
    outcome_items: dict[str, list[RowMapping]] = defaultdict(list)
    for item in facts["open_items"]:
        rule.check(
            bool(item["owner"]) and item["next_check_at"] is not None,
            f"item {item['id']} has no owner or no next check",
        )
        if item["kind"] == "outcome":
            outcome_items[item["saga_id"]].append(item)
    for saga in facts["sagas"]:
        mine = outcome_items.get(saga["id"], [])
        if saga["state"] == "needs_reconciliation":
            rule.check(
                len(mine) == 1,
                f"saga {saga['id']} needs reconciliation with {len(mine)} open outcome item(s)",
            )
        elif mine:
            rule.check(False, f"saga {saga['id']} is {saga['state']} with an open outcome item")
    return rule


def _fencing(facts: dict[str, Any]) -> Invariant:
    rule = Invariant(
        "fencing",
        "no audit row and no job result written under an expired or superseded lease",
    )
    for row in facts["transitions"]:
        if row["job_id"] is None:
            continue
        rule.check(
            row["lease_valid"] is None or bool(row["lease_valid"]),
            f"saga {row['saga_id']} v{row['version']} ({row['event']}) was written by job "
            f"{row['job_id']} after its lease expired or passed to another worker",
        )
    rule.checked += 1
    for job_id in facts["orphan_results"]:
        rule.problems.append(f"job {job_id} has a result but was not completed")
    return rule


def _audit(facts: dict[str, Any]) -> Invariant:
    rule = Invariant("audit", "one append-only row per transition, versions 1..n, chained states")
    trail: dict[str, list[RowMapping]] = defaultdict(list)
    for row in facts["transitions"]:
        trail[row["saga_id"]].append(row)
    for saga in facts["sagas"]:
        rows = trail.get(saga["id"], [])
        versions = [row["version"] for row in rows]
        chained = all(rows[i]["from_state"] == rows[i - 1]["to_state"] for i in range(1, len(rows)))
        ok = (
            versions == list(range(1, saga["version"] + 1))
            and chained
            and bool(rows)
            and rows[-1]["to_state"] == saga["state"]
            and rows[0]["from_state"] is None
        )
        rule.check(
            ok,
            f"saga {saga['id']}: audit versions {versions[:8]} for version "
            f"{saga['version']} in {saga['state']}",
        )
    return rule


def _declared(facts: dict[str, Any]) -> Invariant:
    rule = Invariant(
        "transitions_declared",
        "every persisted transition is one its machine declares (source, event, target)",
    )
    registry: Registry = facts["registry"]
    for row in facts["transitions"]:
        where = f"saga {row['saga_id']} v{row['version']}"
        try:
            machine = registry.get(row["kind"], int(row["definition_version"])).machine
        except LookupError:
            if not _retired(registry, row["kind"], int(row["definition_version"])):
                rule.check(
                    False, f"{where}: kind {row['kind']} v{row['definition_version']} unknown"
                )
            continue
        if row["event"] == MIGRATED:
            # The plan's mapping, checked when it ran: the target is a state here.
            ok = machine.has_state(row["to_state"])
        elif row["from_state"] is None:
            ok = row["event"] == "start" and row["to_state"] == machine.initial.name
        else:
            ok = any(
                t.event == row["event"]
                and row["from_state"] in t.source
                and t.target == row["to_state"]
                for t in machine.transitions
            )
        rule.check(
            ok,
            f"{where}: {row['from_state']} --{row['event']}--> {row['to_state']} "
            f"is not declared by {machine.name} v{machine.version}",
        )
    return rule


def _one_effect_per_event(facts: dict[str, Any]) -> Invariant:
    rule = Invariant(
        "one_effect_per_event", "a provider event (by event id) moves a saga at most once"
    )
    rule.checked = len({row["event_id"] for row in facts["transitions"] if row["event_id"]})
    for row in facts["inbox_effects"]:
        rule.problems.append(f"event {row['event_id']} moved sagas {row['effects']} times")
    return rule


def _outbox(facts: dict[str, Any]) -> Invariant:
    rule = Invariant(
        "outbox",
        "every transition into a state that declares an event wrote that event's outbox row "
        "(transitions before retention's horizon excepted: their rows may be pruned)",
    )
    registry: Registry = facts["registry"]
    horizon = facts["outbox_horizon"]
    written: dict[tuple[str, int, str], int] = defaultdict(int)
    missing: list[tuple[tuple[str, int, str], str, bool]] = []
    for row in facts["transitions"]:
        definition = int(row["definition_version"])
        try:
            emits = registry.get(row["kind"], definition).emits
        except LookupError:
            continue  # reported by transitions_declared
        if row["event"] == MIGRATED or (horizon is not None and as_utc(row["at"]) < horizon):
            continue  # a migration publishes nothing: the business state did not change
        for emit in emits:
            if row["to_state"] not in emit.states or not emit.applies_to(definition):
                continue
            key = (row["kind"], definition, emit.type)
            rule.checked += 1
            if event_id(row["saga_id"], int(row["version"]), emit.type) in facts["outbox_events"]:
                written[key] += 1
                continue
            where = f"saga {row['saga_id']} v{row['version']} entered {row['to_state']}"
            missing.append(
                (key, f"{where} without its {emit.type} event in the outbox", emit.since is None)
            )
    for key, problem, unversioned in missing:
        # Not one transition under this version wrote it: declared after they were made?
        hint = (
            f"; no transition under {key[0]} v{key[1]} wrote one: if {key[2]} was declared "
            f"after they were made, declare it from a new version on: Emit({key[2]!r}, …, "
            "since=V) on a new version of the machine"
            if unversioned and not written[key]
            else ""
        )
        rule.problems.append(problem + hint)
    return rule


def _liveness(facts: dict[str, Any]) -> Invariant:
    rule = Invariant(
        "liveness",
        "every saga is final, owned by reconciliation, or within its deadline (plus a minute); "
        "no dead letter, no dead-lettered event; no overdue check or unseen escalation",
    )
    registry: Registry = facts["registry"]
    owned = {item["saga_id"] for item in facts["open_items"] if item["kind"] == "outcome"}
    for saga in facts["sagas"]:
        machine = _machine(registry, saga["kind"], int(saga["definition_version"]))
        if machine is not None and not machine.has_state(saga["state"]):
            rule.check(False, f"saga {saga['id']} is in {saga['state']}, a state its kind lacks")
            continue
        if machine is None or machine.state(saga["state"]).terminal or saga["id"] in owned:
            rule.checked += 1
            continue
        late = saga["past_deadline_s"]
        rule.check(
            late is None or float(late) <= LIVENESS_FLOOR_S,
            f"saga {saga['id']} in {saga['state']} is {float(late or 0):.0f} s past its "
            f"{saga['deadline_event']} deadline",
        )
    for job in facts["dead_letters"]:
        rule.check(
            False,
            f"dead letter {job['id']} ({job['kind']}, {job['error_class']}): "
            f"{(job['last_error'] or '')[:120]}",
        )
    for event in facts["dead_events"]:
        rule.check(
            False,
            f"event {event['event_id']} was dead-lettered: {(event['last_error'] or '')[:120]}",
        )
    for item in facts["open_items"]:
        late = float(item["past_deadline_s"])
        rule.check(
            late <= LIVENESS_FLOOR_S or item["overdue_at"] is not None,
            f"item {item['id']} is {late:.0f} s past its deadline and was never escalated",
        )
        if item["owner"] == "checker":
            behind = float(item["past_check_s"])
            rule.check(
                behind <= LIVENESS_FLOOR_S,
                f"item {item['id']}: the checker is {behind:.0f} s late for its next check",
            )
    return rule


def _stat_counts(facts: dict[str, Any]) -> Invariant:
    rule = Invariant(
        "stat_counts",
        "the counts `saga stats` keeps (sagas per kind and state, archived jobs per queue, "
        "published events, broker errors) equal a count of the rows",
    )
    for row in facts["stat_counts"]:
        name = ":".join(part for part in (row["metric"], row["key1"], row["key2"]) if part)
        rule.check(
            row["kept"] == row["actual"] and row["kept_total"] == row["actual_total"],
            f"{name} kept {row['kept']} (total {row['kept_total']}), "
            f"rows say {row['actual']} (total {row['actual_total']})",
        )
    return rule
