"""The typed answer a Spark task gives the driver per work item survives its trip as
JSON: a receipt with its errors and new fields, or a failure; never both, never neither."""

from __future__ import annotations

import pytest

from airflow_connectors.engine.answer import ItemFailure, TaskAnswer
from airflow_connectors.engine.evolution import new_fields
from airflow_connectors.state.records import ErrorRecord, ItemReceipt


def test_an_answer_with_a_receipt_round_trips() -> None:
    receipt = ItemReceipt(
        "in/a.json", 120, 7, 1, 120, True, 0, meta={"seen": 120}, retries=2,
        executor={"host": "h", "id": "driver", "dir": "/tmp"},
    )  # fmt: skip
    errors = (ErrorRecord("parse", "bad record", "in/a.json", 3),)
    answer = TaskAnswer(4, receipt, errors, {"extra": ("BIGINT", "!a JSON object")})
    back = TaskAnswer.from_json(answer.to_json())
    assert back == answer
    assert (back.key, back.failure) == ("in/a.json", None)
    # The driver reads new fields per object, in plan order.
    assert new_fields([back]) == {
        "extra": [("BIGINT", "in/a.json"), ("!a JSON object", "in/a.json")]
    }


def test_an_answer_with_a_failure_round_trips() -> None:
    failure = ItemFailure("source", "in/b.json", "connector p.t.c: cannot reach", "Traceback")
    back = TaskAnswer.from_json(TaskAnswer(9, failure=failure).to_json())
    assert (back.part, back.failure, back.receipt, back.key) == (9, failure, None, "in/b.json")
    assert new_fields([back]) == {}


def test_an_answer_is_a_receipt_or_a_failure() -> None:
    with pytest.raises(ValueError, match="part 1 needs a receipt or a failure"):
        TaskAnswer(1)
    receipt = ItemReceipt("k", 1, 1, 0, 1, True, 0)
    with pytest.raises(ValueError, match="part 2"):
        TaskAnswer(2, receipt, failure=ItemFailure("internal", "k", "bug"))
