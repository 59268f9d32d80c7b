"""
The checks of an application's parts, one part at a time.

Its reconciliation policies (their kinds, states, outcomes and judges), its
inbox routes' doors, and its steps' attempts against their saga's ceiling:
what :meth:`saga.core.app.Application.problems` gathers.  Each is a function
of the parts it checks, apart from the application's value
(:mod:`saga.core.app`), whose module they would otherwise fill.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from saga.core.recon.items import ReconPolicy
from saga.core.recon.lifecycle import ReconHook
from state_machine import RECONCILIATION, ROUTE

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from saga.core.messages.inbox import Route
    from saga.core.queue.kinds import JobKind
    from saga.core.sagas.registry import Registry


def recon_problems(
    recon: ReconPolicy | Mapping[str, ReconPolicy],
    registry: Registry,
    wired: Mapping[str, ReconPolicy],
) -> list[str]:
    """What is wrong with its reconciliation (``wired``: the policy of each kind that has one)."""
    if isinstance(recon, ReconPolicy):
        policies = {"": recon} if recon.outcomes else {}
    else:
        policies = dict(recon)
    found = _unknown_kinds(policies, registry)
    for kind, policy in policies.items():
        machines = [t.machine for t in registry if t.machine.name == kind or not kind]
        if kind and machines and not all(m.has_state(policy.state) for m in machines):
            found.append(f"reconciliation of {kind!r}: its machine has no state {policy.state!r}")
        if not kind and not any(m.has_state(policy.state) for m in machines):
            found.append(
                f"reconciliation: no saga kind has its state {policy.state!r} "
                "(no item would ever open)"
            )
        where = f"reconciliation of {kind!r}" if kind else "reconciliation"
        events = {t.event for m in machines for t in m.transitions}
        found += [
            f"{where}: outcome {outcome!r} fires {event!r}, which no saga declares"
            for outcome, event in policy.outcomes.items()
            if event not in events
        ]
        found += [
            f"{where}: outcome {outcome!r} fires {event!r}, which its machine does not let "
            "reconciliation fire (fired_by)"
            for outcome, event in policy.outcomes.items()
            for m in machines
            if (origins := m.origins(event)) is not None and RECONCILIATION not in origins
        ]
        found += _judge_problems(where, policy)
    for saga_type in registry:
        name = saga_type.machine.name
        for hook in saga_type.hooks:
            if not isinstance(hook, ReconHook):
                continue
            if name not in wired:
                found.append(
                    f"saga {name!r} registers a ReconHook but the application declares no "
                    "reconciliation policy for it: give Application(recon=…)"
                )
            elif hook.policy is not wired[name]:
                found.append(
                    f"saga {name!r} registers a ReconHook with another policy than the "
                    "application's recon for it (leave the hook out: the engine wires it)"
                )
    return found


def route_origin_problems(
    routes: Sequence[Route], registry: Registry, policies: Mapping[str, ReconPolicy]
) -> list[str]:
    """The inbox routes firing an event their saga keeps to other doors."""
    found: list[str] = []
    for route in routes:
        if route.observe is not None:
            continue  # its events are fired by its observer, as the application's code
        for saga_type in registry:
            origins = saga_type.machine.origins(route.event)
            policy = policies.get(saga_type.machine.name)
            if origins is None and policy is not None and route.event in policy.outcomes.values():
                origins = frozenset({RECONCILIATION})
            if origins is not None and ROUTE not in origins:
                found.append(
                    f"inbox route {route.source}/{route.type} fires {route.event!r}, which "
                    f"saga {saga_type.machine.name!r} lets only "
                    f"{', '.join(sorted(origins))} fire"
                )
    return found


def over_ceiling(ceiling: int | None, kinds: Iterable[JobKind], actions: set[str]) -> list[str]:
    """The kinds running ``actions`` that ask for more attempts than the saga kind's ceiling."""
    if ceiling is None:
        return []
    return [
        f"step {kind.name!r} asks for {kind.max_attempts} attempts, but its saga was "
        f"registered with max_attempts={ceiling} (drop that ceiling, or lower the step's)"
        for kind in kinds
        if kind.name in actions and kind.max_attempts > ceiling
    ]


def _unknown_kinds(policies: Mapping[str, ReconPolicy], registry: Registry) -> list[str]:
    return [
        f"reconciliation policy for {kind!r}, which is no saga kind of the application"
        for kind in policies
        if kind and kind not in registry.kinds
    ]


def _judge_problems(where: str, policy: ReconPolicy) -> list[str]:
    if not policy.outcomes:
        return []
    if policy.judge is not None and policy.unchecked:
        return [f"{where}: names a judge and says unchecked=True; choose one"]
    if policy.judge is None and not policy.unchecked:
        return [
            f"{where}: operators' outcomes ({', '.join(policy.outcomes)}) but no judge: "
            "name one (ReconPolicy(judge=…)) or say ReconPolicy(unchecked=True) to apply "
            "their decisions unchecked"
        ]
    return []
