"""What a batch's Spark task answers the driver for each of its work items: the item's
receipt, the errors to store and the new fields it met, or why it could not be read.

Written by the task body (:func:`airflow_connectors.engine.reader.ingest_partition`)
and read by the driver (:mod:`.batch`, :mod:`.evolution`). It crosses from the Python
worker to the driver as one JSON string per item (plain strings and numbers: no pickled
exception, no Py4J trace), so both sides use this one type instead of reading keys.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from airflow_connectors.state.records import ErrorRecord, ItemReceipt

Stage = Literal["object", "source", "sink", "parse", "internal"]


@dataclass(frozen=True)
class ItemFailure:
    """Why a work item could not be ingested (stages: see :mod:`.reader`)."""

    stage: Stage
    key: str
    #: One line for users: connector, object, cause and what to do.
    message: str
    #: The worker's Python trace, for DEBUG logs only.
    trace: str = ""

    def to_json(self) -> dict[str, Any]:
        """The failure as a JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True)
class TaskAnswer:
    """The answer for one work item: a receipt (with its errors and new fields) when
    the item was read, else its failure."""

    #: The item's index in the batch plan.
    part: int
    receipt: ItemReceipt | None = None
    errors: tuple[ErrorRecord, ...] = ()
    #: Fields the table lacks that the item held (``schema_evolution:
    #: add_new_columns``), each with the SQL type texts of its values (``"!<what>"``
    #: for values no column type holds).
    new_fields: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    failure: ItemFailure | None = None

    def __post_init__(self) -> None:
        if (self.receipt is None) == (self.failure is None):
            raise ValueError(f"the answer for part {self.part} needs a receipt or a failure")

    @property
    def key(self) -> str:
        """The work item's key."""
        if self.receipt is not None:
            return self.receipt.key
        assert self.failure is not None
        return self.failure.key

    def to_json(self) -> str:
        """The answer as the task returns it: one JSON string."""
        doc: dict[str, Any] = {"part": self.part}
        if self.failure is not None:
            doc["failure"] = self.failure.to_json()
        else:
            assert self.receipt is not None
            doc["receipt"] = self.receipt.to_json()
            doc["errors"] = [asdict(e) for e in self.errors]
            if self.new_fields:
                doc["new_fields"] = {k: list(v) for k, v in self.new_fields.items()}
        return json.dumps(doc)

    @classmethod
    def from_json(cls, text: str | bytes) -> TaskAnswer:
        """The inverse of :meth:`to_json`."""
        doc = json.loads(text)
        failure = doc.get("failure")
        receipt = doc.get("receipt")
        return cls(
            part=int(doc["part"]),
            receipt=ItemReceipt(**receipt) if receipt is not None else None,
            errors=tuple(ErrorRecord(**e) for e in doc.get("errors") or ()),
            new_fields={k: tuple(v) for k, v in (doc.get("new_fields") or {}).items()},
            failure=ItemFailure(**failure) if failure is not None else None,
        )
