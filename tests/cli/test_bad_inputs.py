"""
The bad-input catalogue (anchors-reliability.md, section c), through the CLI on each backend.

Each case: the contract's exit code, a message naming the flag (or listing
what is valid), and the database exactly as it was.
"""

from __future__ import annotations

import json

import pytest

from saga import Engine
from saga.cli import main
from saga.exceptions import InvalidInput
from tests import schemas
from tests.helpers import dump, rows

LONG = "x" * 300
DEEP = '{"a":' + "[" * 60_000 + "]" * 60_000 + "}"


@pytest.fixture
def shop(db_url, capsys):
    with Engine(db_url, check_schema=False) as setup:
        schemas.migrate(setup)
    assert 0 == main(
        [
            "intensive",
            "add",
            "js",
            "--seats",
            "2",
            "--price",
            "49.00",
            "--currency",
            "EUR",
            "--db",
            db_url,
        ]
    )
    capsys.readouterr()
    assert 0 == main(
        [
            "purchase",
            "start",
            "--operation-id",
            "op-1",
            "--intensive",
            "js",
            "--student",
            "ann",
            "--db",
            db_url,
            "--json",
        ]
    )
    purchase = json.loads(capsys.readouterr().out)
    return {"url": db_url, "purchase": purchase["id"]}


def _run(shop, capsys, argv):
    args = [arg.replace("{purchase}", shop["purchase"]) for arg in argv]
    with Engine(shop["url"]) as engine:
        before = dump(engine)
    capsys.readouterr()
    code = main([*args, "--db", shop["url"]])
    err = capsys.readouterr().err
    with Engine(shop["url"]) as engine:
        after = dump(engine)
    return code, err, before == after


START = ["purchase", "start", "--intensive", "js", "--student", "bob"]
FIRE = ["instances", "fire", "{purchase}"]
CANCEL = [*FIRE, "cancel", "--payload"]
BY_ANN = ["--actor", "ann", "--reason", "r"]
DELIVER = ["messages", "deliver", "--source", "s", "--event-id", "e", "--type", "t"]
CASES = {
    # 1, 2: an unknown event, an event the state does not take: conflict, the valid ones listed
    "unknown event": (
        [*FIRE, "confirmd", "--actor", "ann", "--reason", "r"],
        3,
        "events: payment_requested",
    ),
    "event not from this state": (
        [*FIRE, "refund_succeeded", "--actor", "ann", "--reason", "r"],
        3,
        "no transition",
    ),
    # 3: amounts
    "zero price": (
        ["intensive", "add", "x", "--seats", "1", "--price", "0", "--currency", "EUR"],
        2,
        "--price",
    ),
    "negative price": (
        ["intensive", "add", "x", "--seats", "1", "--price", "-5", "--currency", "EUR"],
        2,
        "--price",
    ),
    "price beyond the currency's precision": (
        ["intensive", "add", "x", "--seats", "1", "--price", "10.001", "--currency", "EUR"],
        2,
        "--price",
    ),
    "absurd price": (
        ["intensive", "add", "x", "--seats", "1", "--price", "9" * 20, "--currency", "EUR"],
        2,
        "--price",
    ),
    # 4: currencies
    "lower-case currency": (
        ["intensive", "add", "x", "--seats", "1", "--price", "1", "--currency", "eur"],
        2,
        "--currency",
    ),
    "not a currency": (
        ["intensive", "add", "x", "--seats", "1", "--price", "1", "--currency", "EURO"],
        2,
        "--currency",
    ),
    "same id, other price": (
        ["intensive", "add", "js", "--seats", "2", "--price", "50.00", "--currency", "EUR"],
        3,
        "js",
    ),
    # 5, 6: operation ids
    "empty operation id": ([*START, "--operation-id", ""], 2, "--operation-id"),
    "blank operation id": ([*START, "--operation-id", "   "], 2, "--operation-id"),
    "over-long operation id": ([*START, "--operation-id", LONG], 2, "--operation-id"),
    "control character in operation id": (
        [*START, "--operation-id", "op\x01"],
        2,
        "--operation-id",
    ),
    "same operation id, other request": ([*START, "--operation-id", "op-1"], 3, "op-1"),
    # 7, 8: what is bought
    "unknown intensive": (
        ["purchase", "start", "--operation-id", "op-9", "--intensive", "nope", "--student", "bob"],
        4,
        "nope",
    ),
    "second live purchase": (
        ["purchase", "start", "--operation-id", "op-2", "--intensive", "js", "--student", "ann"],
        3,
        "ann",
    ),
    "zero seats": (
        ["intensive", "add", "y", "--seats", "0", "--price", "1", "--currency", "EUR"],
        2,
        "--seats",
    ),
    "negative seats": (
        ["intensive", "add", "y", "--seats", "-1", "--price", "1", "--currency", "EUR"],
        2,
        "--seats",
    ),
    # 9: payloads
    "malformed JSON payload": (
        [*FIRE, "cancel", "--payload", "{oops", "--actor", "ann", "--reason", "r"],
        2,
        "--payload",
    ),
    "JSON that is not an object": (
        [*FIRE, "cancel", "--payload", "[1]", "--actor", "ann", "--reason", "r"],
        2,
        "--payload",
    ),
    "NaN in a payload": (
        [*FIRE, "cancel", "--payload", '{"a": NaN}', "--actor", "ann", "--reason", "r"],
        2,
        "--payload: numbers must be finite",
    ),
    "a number beyond a double in a payload": (
        [*FIRE, "cancel", "--payload", '{"a": 1e999}', "--actor", "ann", "--reason", "r"],
        2,
        "--payload: numbers must be finite",
    ),
    "Infinity in a message's payload": (
        [*DELIVER, "--payload", '{"a": [-Infinity]}'],
        2,
        "--payload: numbers must be finite",
    ),
    "a payload nested 60,000 deep": (
        [*FIRE, "cancel", "--payload", DEEP, "--actor", "ann", "--reason", "r"],
        2,
        "--payload: must not nest objects and arrays more than 64 levels deep",
    ),
    "a payload nested 65 deep": (
        [*CANCEL, '{"a":' + "[" * 64 + "]" * 64 + "}", *BY_ANN],
        2,
        "more than 64 levels deep",
    ),
    "a number of 5,000 digits in a payload": (
        [*CANCEL, '{"a": 1' + "0" * 5000 + "}", *BY_ANN],
        2,
        "--payload: numbers must have at most",
    ),
    # 10: provider events
    "unknown webhook type": (
        ["webhook", "deliver", "--event-id", "e1", "--type", "payment.won", "--payment-id", "p1"],
        2,
        "--type",
    ),
    # 13: durations
    "zero hold": ([*START, "--operation-id", "op-3", "--hold-seconds", "0"], 2, "--hold-seconds"),
    "absurd hold": (
        [*START, "--operation-id", "op-3", "--hold-seconds", "9" * 12],
        2,
        "--hold-seconds",
    ),
    # 14: operators
    "over-long reason": (
        [*FIRE, "cancel", "--actor", "ann", "--reason", "r" * 5000],
        2,
        "--reason",
    ),
    "malformed actor": ([*FIRE, "cancel", "--actor", "ann smith", "--reason", "r"], 2, "--actor"),
    "missing reason": ([*FIRE, "cancel", "--actor", "ann"], 2, "--reason"),
    # 16: pagination
    "zero limit": (["purchase", "list", "--limit", "0"], 2, "--limit"),
    "negative limit": (["instances", "list", "--limit", "-1"], 2, "--limit"),
    "limit over the maximum": (["instances", "list", "--limit", "1000000"], 2, "--limit"),
    # 17: the command line itself
    "dlq replay without a filter": (["dlq", "replay"], 2, "--job"),
    "zero batch": (["dlq", "replay", "--all", "--yes", "--batch", "0"], 2, "--batch"),
    "unknown subcommand": (["purchase", "refund"], 2, "invalid choice"),
    "unknown outbox event": (["outbox", "replay", "--event", "nope"], 4, "nope"),
    # 18: settings
    "zero lease": (["worker", "--lease-seconds", "0"], 2, "--lease-seconds"),
    "negative poll interval": (["relay", "--poll-interval", "-1"], 2, "--poll-interval"),
    "a window in the past": (["prune", "--older-than", "-1d"], 2, "--older-than"),
    "a window in years": (["prune", "--older-than", "1y"], 2, "--older-than"),
    "a window of a trillion days": (
        ["prune", "--older-than", "1000000000000d"],
        2,
        "--older-than: must be at most 36500d",
    ),
    "a prune batch of a billion": (
        ["prune", "--older-than", "1d", "--batch", "1000000000"],
        2,
        "--batch: must be between 1 and 10000",
    ),
    "a worker batch of a billion": (
        ["worker", "--burst", "--batch", "1000000000"],
        2,
        "--batch: must be between 1 and 10000",
    ),
    "a relay batch of a billion": (
        ["relay", "--burst", "--batch", "1000000000"],
        2,
        "--batch: must be between 1 and 10000",
    ),
    # --sandbox-db: checked by every command, not only those that open the sandbox
    "a sandbox URL that is not one, for verify": (
        ["verify", "--sandbox-db", "nope"],
        2,
        "--sandbox-db: not a database URL",
    ),
    "a sandbox URL that is not one, for a listing": (
        ["purchase", "list", "--sandbox-db", "nope"],
        2,
        "--sandbox-db: not a database URL",
    ),
    "a sandbox URL that is not one, before the command": (
        ["--sandbox-db", "nope", *START, "--operation-id", "op-5"],
        2,
        "--sandbox-db: not a database URL",
    ),
    "an empty sandbox URL": (["stats", "--sandbox-db", ""], 2, "--sandbox-db: must not be empty"),
    # --app naming something that is not an application, and would be called with the engine
    "a built-in function as the application": (
        ["instances", "list", "--app", "os:system"],
        2,
        "--app: 'os:system' is the function",
    ),
    "an HTTP broker": (
        ["relay", "--burst", "--broker", "http://user:secret@example.invalid/"],
        2,
        "--broker: expected a RabbitMQ URL",
    ),
    "an HTTP broker for the worker": (
        ["worker", "--burst", "--broker", "http://example.invalid/"],
        2,
        "--broker: expected a RabbitMQ URL",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_refused_clearly_and_changes_nothing(shop, capsys, case):
    """The contract's exit code, the field named, every table as it was."""
    argv, code, named = CASES[case]
    exit_code, err, unchanged = _run(shop, capsys, argv)
    assert (code, True) == (exit_code, unchanged), err
    assert named in err


def test_an_sql_injection_in_a_reason_is_stored_literally(shop, capsys):
    """Free text is a bound value: it lands in the audit trail as written, nothing else moves."""
    reason = "x'); DROP TABLE sagas; --"
    assert 0 == main(
        [
            *FIRE[:2],
            shop["purchase"],
            "cancel",
            "--actor",
            "ann",
            "--reason",
            reason,
            "--db",
            shop["url"],
        ]
    )
    with Engine(shop["url"]) as engine:
        causes = [h.cause for h in engine.sagas.history(shop["purchase"])]
        assert reason == causes[-1]
        assert rows(engine, "SELECT count(*) AS n FROM sagas")[0]["n"] == 1


@pytest.mark.parametrize("field", ["student_id", "operation_id"])
def test_a_nul_character_is_a_validation_error_not_a_driver_error(shop, field):
    """PostgreSQL's text refuses NUL: the engine says which field, before the driver does."""
    values = {"operation_id": "op-7", "intensive_id": "js", "student_id": "bob"}
    values[field] = "a\x00b"
    with Engine(shop["url"]) as engine:
        before = dump(engine)
        with pytest.raises(InvalidInput) as info:
            engine.services.purchases.start(**values)
        assert field in info.value.field
        assert before == dump(engine)


def test_a_broker_url_is_not_repeated_in_the_error(shop, capsys):
    """It may hold a password."""
    _, err, _ = _run(shop, capsys, ["relay", "--burst", "--broker", "http://u:secret@h/"])
    assert "secret" not in err


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        ({"a": float("nan")}, "numbers must be finite"),
        ({"a": [1.0, {"b": float("inf")}]}, "numbers must be finite"),
        ("deep", "more than 64 levels deep"),
    ],
)
def test_the_python_api_checks_payloads_as_the_cli_does(shop, payload, problem):
    """A message's payload given as a mapping: the same bounds, nothing written."""
    from saga.core.messages.inbox import Message

    if payload == "deep":
        payload = inner = {}
        for _ in range(100):
            inner["a"] = {}
            inner = inner["a"]
    with Engine(shop["url"]) as engine:
        before = dump(engine)
        with pytest.raises(InvalidInput) as refused:
            engine.messages.deliver(Message(source="s", event_id="e", type="t", payload=payload))
        assert "payload" == refused.value.field
        assert problem in refused.value.problem
        assert before == dump(engine)
