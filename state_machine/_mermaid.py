"""Render a :class:`~state_machine.Machine` as a Mermaid state diagram."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from state_machine._definition import State
    from state_machine._machine import Machine


def to_mermaid(machine: Machine) -> str:
    """
    The machine as Mermaid ``stateDiagram-v2`` source.

    Every state and every (transition, source) pair appears once.  Labels say
    ``event [guard]``; compensations and timeouts are marked, and each state
    carries a note with its timeout, the actions it queues and its ``meta``.
    """
    lines = [
        "---",
        f"title: {machine.name} (version {machine.version})",
        "---",
        "stateDiagram-v2",
        f"    [*] --> {machine.initial.name}",
    ]
    for state in machine.states:
        lines.append(f"    state {state.name}")
    for transition in machine.transitions:
        label = transition.label
        marks = []
        if any(
            (s := machine.state(source)).timeout is not None and s.timeout.event == transition.event
            for source in transition.source
        ):
            marks.append("timeout")
        if transition.compensation:
            marks.append("compensation")
        if marks:
            label += f" ({', '.join(marks)})"
        for source in transition.source:
            lines.append(f"    {source} --> {transition.target}: {label}")
    for state in machine.states:
        if state.terminal:
            lines.append(f"    {state.name} --> [*]")
    for state in machine.states:
        note = _note(state)
        if note:
            lines.append(f"    note right of {state.name}: {note}")
    terminal = ",".join(state.name for state in machine.states if state.terminal)
    lines.append("    classDef terminal font-weight:bold,stroke-width:3px")
    lines.append(f"    class {terminal} terminal")
    return "\n".join(lines) + "\n"


def _note(state: State) -> str:
    # Mermaid ends a statement at ";" and splits notes at ":", so neither appears here.
    parts = [
        f"{key} {'as before' if value is None else value}" for key, value in state.meta.items()
    ]
    if state.timeout is not None:
        parts.append(f"timeout {state.timeout.describe()}")
    if state.actions:
        parts.append(f"queues {' and '.join(state.actions)}")
    return ", ".join(parts)
