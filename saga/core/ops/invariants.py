"""What ``saga verify`` reports: invariants, each with what it checked and what broke it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

EXAMPLES: Final = 5


@dataclass(slots=True)
class Invariant:
    """One rule: how many things were checked, and the ones that break it."""

    name: str
    description: str
    checked: int = 0
    problems: list[str] = field(default_factory=list)

    def check(self, ok: bool, problem: str) -> None:
        """Count one thing; remember it if it breaks the rule."""
        self.checked += 1
        if not ok:
            self.problems.append(problem)

    def to_json(self) -> dict[str, Any]:
        """The contract's invariant object, plus a few examples."""
        return {
            "name": self.name,
            "checked": self.checked,
            "violations": len(self.problems),
            "description": self.description,
            "examples": self.problems[:EXAMPLES],
        }


@dataclass(slots=True)
class Report:
    """All invariants."""

    invariants: list[Invariant]

    @property
    def ok(self) -> bool:
        """Whether every invariant holds."""
        return all(not invariant.problems for invariant in self.invariants)

    def to_json(self) -> dict[str, Any]:
        """The contract's verify object."""
        return {"ok": self.ok, "invariants": [i.to_json() for i in self.invariants]}
