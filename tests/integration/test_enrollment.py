"""
The second application under the shipped CLI, on SQLite and on PostgreSQL.

`saga/examples/enrollment.py` is written with the public API only; here it runs
through `saga worker --app`, `saga messages deliver`, `saga recon` and
`saga verify --app`: its actions, its deadline, its callbacks, its unknown
outcome in reconciliation, its compensation and its invariant.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil

import pytest
import sqlalchemy as sa

from saga import Engine
from saga.core.faults import EXIT_CODE
from saga.examples.enrollment import app, contract_key
from saga.examples.enrollment_esign import sandbox_for
from saga.testing import run_due
from tests import schemas
from tests.helpers import execute, expire_lease, make_due
from tests.purchases import cli_json

APP = ("--app", "saga.examples.enrollment:app")


@pytest.fixture
def school(db_url):
    with Engine(db_url, app=app, check_schema=False) as setup:
        schemas.migrate(setup)
    with Engine(db_url, app=app) as engine:
        yield engine
        shutil.rmtree(sandbox_for(engine).folder, ignore_errors=True)


def enroll(engine, student):
    request = {"student": student, "sign_seconds": 600}
    return engine.sagas.start("enrollment", operation_id=f"e-{student}", request=request).saga


def work(capsys, db_url):
    code, report = cli_json(capsys, "worker", "--burst", *APP, "--db", db_url)
    assert (0, 0) == (code, report["dead_lettered"])


def state(engine, saga):
    return engine.sagas.get(saga.id).state


def verify(capsys, db_url):
    code, verdict = cli_json(capsys, "verify", *APP, "--db", db_url)
    return code, {i["name"] for i in verdict["invariants"] if i["violations"]}


@pytest.mark.slow
def test_a_signed_contract_enrolls_the_student(school, db_url, capsys):
    """Sent by the worker, signed at the provider, its callback delivered: enrolled."""
    saga = enroll(school, "ann")
    work(capsys, db_url)
    assert "contract_sent" == state(school, saga)
    school.services.signatures.sign(key=contract_key(saga.id))
    payload = json.dumps({"reference": saga.id})
    callback = ("messages", "deliver", "--source", "esign", "--type", "envelope.completed")
    code, shown = cli_json(
        capsys, *callback, "--event-id", "cb-1", "--payload", payload, *APP, "--db", db_url
    )
    assert (0, "enrolled") == (code, shown["state"])
    assert (0, set()) == verify(capsys, db_url)


@pytest.mark.slow
def test_a_missed_deadline_withdraws_and_voids_the_contract(school, db_url, capsys):
    """The signature deadline passes (database clock): withdrawn, the contract voided."""
    saga = enroll(school, "bob")
    work(capsys, db_url)
    make_due(school, f"timer:{saga.id}:2")
    work(capsys, db_url)
    assert "withdrawn" == state(school, saga)
    assert "voided" == school.services.signatures.status(key=contract_key(saga.id)).status
    assert (0, set()) == verify(capsys, db_url)


@pytest.mark.slow
def test_a_send_that_timed_out_is_settled_by_the_checker(school, db_url, capsys):
    """The envelope left before the timeout: the checker finds it, the saga goes on."""
    saga = enroll(school, "timeout-cleo")
    work(capsys, db_url)
    assert "needs_reconciliation" == state(school, saga)
    (item,) = school.recon.find()
    make_due(school, f"recon:{item.id}:0")
    work(capsys, db_url)
    assert "contract_sent" == state(school, saga)
    resolved = school.recon.find(status="resolved")[0]
    assert ("sent", "checker") == (resolved.resolution, resolved.resolved_by)


@pytest.mark.slow
def test_an_operators_decision_is_checked_against_the_provider(school, db_url, capsys):
    """Nothing left: "sent" is refused (exit 3), "not_sent" withdraws."""
    saga = enroll(school, "down-dan")
    work(capsys, db_url)
    (item,) = school.recon.find()
    base = ("recon", "resolve", item.id, "--operator", "ann", "--reason", "checked", *APP)
    assert 3 == cli_json(capsys, *base, "--outcome", "sent", "--db", db_url)[0]
    code, _ = cli_json(capsys, *base, "--outcome", "not_sent", "--db", db_url)
    assert 0 == code, capsys.readouterr().err
    assert "withdrawn" == state(school, saga)


@pytest.mark.slow
def test_verify_names_an_enrollment_the_provider_never_signed(school, db_url, capsys):
    """The application's invariant can fail: an enrolled saga without a signature."""
    saga = enroll(school, "eve")
    work(capsys, db_url)
    execute(school, "UPDATE sagas SET state = 'enrolled' WHERE id = :id", id=saga.id)
    code, broken = verify(capsys, db_url)
    assert 1 == code
    assert "enrolled_means_signed" in broken


def ledger(engine):
    with engine.db.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT saga_id, outcome FROM enrollment_contracts"))
        return sorted(tuple(row) for row in rows)


@pytest.mark.slow
def test_its_own_table_moves_with_its_sagas(school, db_url, capsys):
    """The ledger row commits with contract_sent and closes with the saga; stats show it."""
    saga = enroll(school, "lena")
    work(capsys, db_url)
    assert [(saga.id, None)] == ledger(school)
    school.instances.cancel(saga.id, reason="changed her mind", actor="lena")
    assert [(saga.id, "withdrawn")] == ledger(school)
    code, stats = cli_json(capsys, "stats", *APP, "--db", db_url)
    assert (0, {"withdrawn": 1}) == (code, stats["application"]["contracts"])


@pytest.mark.slow
def test_verify_names_a_contract_missing_from_the_ledger(school, db_url, capsys):
    """The ledger invariant can fail: a sent contract whose row is gone."""
    saga = enroll(school, "mia")
    work(capsys, db_url)
    assert (0, set()) == verify(capsys, db_url)
    execute(school, "DELETE FROM enrollment_contracts WHERE saga_id = :id", id=saga.id)
    assert (1, {"contract_ledger"}) == verify(capsys, db_url)


def test_db_upgrade_builds_the_applications_tables(tmp_path, capsys):
    """`saga db upgrade --app` applies the engine's migrations, then the application's."""
    url = f"sqlite:///{tmp_path}/fresh.db"
    code, done = cli_json(capsys, "db", "upgrade", *APP, "--db", url)
    assert 0 == code
    assert {"before": 0, "after": 2} == done["components"]["enrollment"]
    assert ["enrollment/0001_contracts", "enrollment/0002_contract_outcome"] == [
        name for name in done["applied"] if name.startswith("enrollment/")
    ]
    code, again = cli_json(capsys, "db", "upgrade", *APP, "--db", url)
    assert (0, []) == (code, again["applied"])


def _checker_dies(url, marker):
    os.environ["SAGA_CRASH_POINTS"] = "checker.after_answer"
    os.environ["SAGA_CRASH_MARKER"] = marker
    with Engine(url, app=app) as engine:
        run_due(engine)


@pytest.mark.slow
def test_a_checker_killed_between_the_answer_and_the_decision_decides_once_later(
    school, db_url, capsys, tmp_path
):
    """The provider answered, the checker died: after its lease, one decision, one transition."""
    saga = enroll(school, "timeout-dora")
    work(capsys, db_url)
    (item,) = school.recon.find()
    make_due(school, f"recon:{item.id}:0")
    process = multiprocessing.get_context("forkserver").Process(
        target=_checker_dies, args=(db_url, str(tmp_path / "m"))
    )
    process.start()
    process.join(timeout=60)
    assert EXIT_CODE == process.exitcode
    assert "needs_reconciliation" == state(school, saga)
    expire_lease(school, f"recon:{item.id}:0")
    work(capsys, db_url)
    assert "contract_sent" == state(school, saga)
    resolutions = [h.event for h in school.sagas.history(saga.id) if h.event == "resolve_sent"]
    assert ["resolve_sent"] == resolutions
