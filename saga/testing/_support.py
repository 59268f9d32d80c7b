"""The kit's plumbing: a fresh database per example, injected crashes, a machine's application."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from saga.core.app import Application
from saga.core.queue.kinds import JobKind, Step
from saga.core.sagas.registry import Registry
from steps import TransientError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from saga.core.queue.values import Job
    from state_machine import Machine


def _stub(job: Job) -> None:
    del job


def application_of(
    machine: Machine, steps: Mapping[str, Step | Callable[..., Any]] | None
) -> Application:
    """An application of one machine; actions without a given step run a stub."""
    actions = {action for state in machine.states for action in state.actions}
    given = dict(steps or {})
    made: dict[str, Step] = {}
    for action in sorted(actions):
        step = given.get(action, _stub)
        made[action] = step if isinstance(step, Step) else Step(step)
    registry = Registry()
    registry.register(machine, steps=made)
    return Application(name=f"{machine.name}-test", registry=registry)


@dataclass
class _Faults:
    """The next step to run raises a transient error (once)."""

    armed: bool = False
    injected: int = 0

    def wrap(self, kind: JobKind) -> JobKind:
        handler = kind.handler

        def crashing(job: Job) -> Any:
            if self.armed:
                self.armed = False
                self.injected += 1
                raise TransientError(f"injected crash in {kind.name}")
            return handler(job)

        return replace(kind, handler=crashing)


@dataclass
class _Database:
    """A fresh database for one example: a SQLite file, or a PostgreSQL schema."""

    url: str
    cleanup: Callable[[], None] = field(default=lambda: None)

    @classmethod
    def fresh(cls, base: str | None, *, template: Path | None = None) -> _Database:
        if base is None or base.startswith("sqlite"):
            folder = Path(tempfile.mkdtemp(prefix="saga-test-"))
            if template is not None:
                shutil.copyfile(template, folder / "saga.db")
            return cls(f"sqlite:///{folder / 'saga.db'}", lambda: shutil.rmtree(folder, True))
        name = f"saga_test_{uuid.uuid4().hex[:12]}"
        admin = sa.create_engine(base)
        with admin.begin() as conn:
            conn.execute(sa.schema.CreateSchema(name))
        separator = "&" if "?" in base else "?"

        def drop() -> None:
            # The schema, and those derived from it (the purchase's sandbox
            # provider keeps its own, "<schema>_sandbox").
            with admin.begin() as conn:
                for schema in sa.inspect(conn).get_schema_names():
                    if schema == name or schema.startswith(f"{name}_"):
                        conn.execute(sa.schema.DropSchema(schema, cascade=True))
            admin.dispose()

        return cls(f"{base}{separator}options=-csearch_path%3D{name}", drop)
