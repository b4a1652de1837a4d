"""json ``update_format: debezium``: Debezium's PostgreSQL change events (op c, r, u, d,
t), bare or in the JsonConverter's ``{"schema", "payload"}`` wrapper, become change
records; Debezium's value encodings (days, epoch micro/milliseconds, base64 decimals)
become column values by the event's schema or, without one, by ``json_flavor``."""

from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from pydantic import ValidationError

from airflow_connectors.changes import DELETE, OP, TRUNCATE, UPSERT
from airflow_connectors.formats.base import Decoded
from airflow_connectors.formats.json_format import JsonConfig, JsonFormat
from airflow_connectors.spec import ColumnSpec, SqlType, TableSpec
from airflow_connectors.transports.kafka_input import _values

COLUMNS = (
    ColumnSpec(name="id", type=SqlType("INT"), nullable=False),
    ColumnSpec(name="first_name", type=SqlType("VARCHAR")),
    ColumnSpec(name="born", type=SqlType("DATE")),
    ColumnSpec(name="created", type=SqlType("TIMESTAMP")),
    ColumnSpec(name="updated", type=SqlType("TIMESTAMP")),
    ColumnSpec(name="price", type=SqlType("DECIMAL", 10, 2)),
    ColumnSpec(name="amount", type=SqlType("DECIMAL", 12, 4)),
    ColumnSpec(name="opens", type=SqlType("TIME")),
    ColumnSpec(name="doc", type=SqlType("VARCHAR")),
    ColumnSpec(name="active", type=SqlType("BOOLEAN")),
)

BORN = dt.date(1990, 5, 17)
CREATED = dt.datetime(2024, 3, 1, 12, 30, 45, 123456)
OPENS = dt.time(9, 30, 15, 250000)


def unscaled(value: Decimal, scale: int) -> str:
    """A decimal as Kafka Connect's Decimal encodes it: base64 of the big-endian two's
    complement of the unscaled value."""
    n = int(value.scaleb(scale))
    return base64.b64encode(n.to_bytes((n.bit_length() + 8) // 8, "big", signed=True)).decode()


def micros(t: dt.datetime) -> int:
    return (t - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)


# The after image of a row of PostgreSQL's table
#   customers(id int primary key, first_name text, born date, created timestamp,
#             updated timestamptz, price numeric(10,2), amount numeric, opens time,
#             doc jsonb, active boolean)
# as Debezium's PostgreSQL connector writes it with its defaults
# (time.precision.mode=adaptive, decimal.handling.mode=precise).
def after(i: int, name: str = "Anne") -> dict[str, Any]:
    return {
        "id": i,
        "first_name": name,
        "born": (BORN - dt.date(1970, 1, 1)).days,  # io.debezium.time.Date
        "created": micros(CREATED),  # io.debezium.time.MicroTimestamp
        "updated": "2024-03-01T10:30:45.5Z",  # io.debezium.time.ZonedTimestamp
        "price": unscaled(Decimal("1234.56"), 2),  # Decimal, scale 2
        "amount": {"scale": 3, "value": unscaled(Decimal("-12.345"), 3)},  # VariableScale
        "opens": (dt.datetime.combine(BORN, OPENS) - dt.datetime.combine(BORN, dt.time()))
        // dt.timedelta(microseconds=1),  # io.debezium.time.MicroTime
        "doc": '{"tags": ["a", "b"]}',  # io.debezium.data.Json
        "active": True,
    }


def _field(name: str, kind: str, logical: str | None = None, **extra: Any) -> dict[str, Any]:
    f: dict[str, Any] = {"type": kind, "optional": name != "id", "field": name}
    if logical:
        f.update(name=logical, version=1)
    f.update(extra)
    return f


ROW_FIELDS = [
    _field("id", "int32"),
    _field("first_name", "string"),
    _field("born", "int32", "io.debezium.time.Date"),
    _field("created", "int64", "io.debezium.time.MicroTimestamp"),
    _field("updated", "string", "io.debezium.time.ZonedTimestamp"),
    _field(
        "price",
        "bytes",
        "org.apache.kafka.connect.data.Decimal",
        parameters={"scale": "2", "connect.decimal.precision": "10"},
    ),
    _field(
        "amount",
        "struct",
        "io.debezium.data.VariableScaleDecimal",
        fields=[
            {"type": "int32", "optional": False, "field": "scale"},
            {"type": "bytes", "optional": False, "field": "value"},
        ],
        doc="Variable scaled decimal",
    ),
    _field("opens", "int64", "io.debezium.time.MicroTime"),
    _field("doc", "string", "io.debezium.data.Json"),
    _field("active", "boolean"),
]


def schema(row_fields: list[dict[str, Any]] = ROW_FIELDS) -> dict[str, Any]:
    """The JsonConverter's schema of a Debezium PostgreSQL envelope (schemas.enable=true)."""
    value = {"type": "struct", "fields": row_fields, "optional": True}
    return {
        "type": "struct",
        "fields": [
            {**value, "name": "dbserver1.inventory.customers.Value", "field": "before"},
            {**value, "name": "dbserver1.inventory.customers.Value", "field": "after"},
            {
                "type": "struct",
                "fields": [
                    {"type": "string", "optional": False, "field": "version"},
                    {"type": "string", "optional": False, "field": "connector"},
                    {"type": "string", "optional": False, "field": "name"},
                    {"type": "int64", "optional": False, "field": "ts_ms"},
                    {"type": "string", "optional": False, "field": "db"},
                    {"type": "string", "optional": False, "field": "schema"},
                    {"type": "string", "optional": False, "field": "table"},
                    {"type": "int64", "optional": True, "field": "txId"},
                    {"type": "int64", "optional": True, "field": "lsn"},
                ],
                "optional": False,
                "name": "io.debezium.connector.postgresql.Source",
                "field": "source",
            },
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
        "optional": False,
        "name": "dbserver1.inventory.customers.Envelope",
        "version": 2,
    }


def source(lsn: int, snapshot: str = "false") -> dict[str, Any]:
    return {
        "version": "3.0.8.Final",
        "connector": "postgresql",
        "name": "dbserver1",
        "ts_ms": 1709296245000,
        "snapshot": snapshot,
        "db": "postgres",
        "sequence": f'["{lsn - 8}","{lsn}"]',
        "schema": "inventory",
        "table": "customers",
        "txId": 771,
        "lsn": lsn,
        "xmin": None,
    }


def envelope(op: str, before: Any, after_: Any, lsn: int) -> dict[str, Any]:
    event: dict[str, Any] = {"before": before, "after": after_, "source": source(lsn)}
    if op == "r":
        event["source"] = source(lsn, snapshot="true")
    event.update(op=op, ts_ms=1709296245123, transaction=None)
    return event


# A snapshot read, an insert, an update (REPLICA IDENTITY DEFAULT: no before), a delete
# (only the key in before), a truncate (no before, no after).
EVENTS = [
    envelope("r", None, after(1), 100),
    envelope("c", None, after(2, "Bob"), 200),
    envelope("u", None, after(1, "Anne Marie"), 300),
    envelope("d", {"id": 2}, None, 400),
    {"source": source(500), "op": "t", "ts_ms": 1709296245999, "transaction": None},
]


def wrapped(event: dict[str, Any]) -> dict[str, Any]:
    return {"schema": schema(), "payload": event}


def table(*, keyed: bool = True) -> TableSpec:
    return TableSpec(
        name="customers",
        columns=COLUMNS,
        primary_key=("id",) if keyed else (),
        sink={"name": "delta"},
    )


def decode(events: list[Any], *, keyed: bool = True, **config: Any) -> list[Decoded]:
    text = b"".join(json.dumps(e).encode() + b"\n" for e in events)
    fmt = JsonFormat(JsonConfig(update_format="debezium", **config), table(keyed=keyed))
    return list(fmt.decode(iter([text]), final=True, first_record=1, at_start=True))


def rows(out: list[Decoded]) -> list[dict[str, Any]]:
    tables = [d.table for d in out if d.table.num_rows]
    return pa.concat_tables(tables).to_pylist() if tables else []


def errors(out: list[Decoded]) -> dict[int, str]:
    return {e.record: e.error for d in out for e in d.errors}


def check_row(row: dict[str, Any], name: str) -> None:
    assert row["first_name"] == name
    assert row["born"] == BORN
    assert row["created"] == CREATED
    assert row["updated"] == dt.datetime(2024, 3, 1, 10, 30, 45, 500000)
    assert row["price"] == Decimal("1234.56")
    assert row["amount"] == Decimal("-12.345")
    assert row["opens"] == OPENS
    assert json.loads(row["doc"]) == {"tags": ["a", "b"]}
    assert row["active"] is True


@pytest.mark.parametrize(
    ("wrap", "flavor"),
    [
        (True, "kafka_connect_json_converter"),
        (True, "default"),  # the wrapper is recognised under every flavor
        (False, "debezium_postgres"),
    ],
    ids=["schema-wrapper", "schema-wrapper-default-flavor", "bare-postgres-flavor"],
)
def test_postgres_events_become_changes(wrap: bool, flavor: str) -> None:
    events = [wrapped(e) for e in EVENTS] if wrap else EVENTS
    out = decode(events, json_flavor=flavor)
    assert errors(out) == {}
    got = rows(out)
    assert [(r["id"], r[OP]) for r in got] == [
        (1, UPSERT),
        (2, UPSERT),
        (1, UPSERT),
        (2, DELETE),
        (None, TRUNCATE),
    ]
    check_row(got[0], "Anne")
    check_row(got[1], "Bob")
    check_row(got[2], "Anne Marie")
    assert got[3]["first_name"] is None  # a delete carries the key
    assert all(v is None for k, v in got[4].items() if k != OP)
    assert sum(d.records for d in out) == len(EVENTS)


def test_wrapped_and_bare_events_mix_in_one_block() -> None:
    events = [wrapped(e) if i % 2 else e for i, e in enumerate(EVENTS)]
    got = rows(decode(events, json_flavor="debezium_postgres"))
    assert [r[OP] for r in got] == [UPSERT, UPSERT, UPSERT, DELETE, TRUNCATE]
    check_row(got[2], "Anne Marie")


def test_the_schema_says_the_unit_whatever_the_flavor() -> None:
    # A timestamp(3) column is io.debezium.time.Timestamp (milliseconds) and a
    # NanoTimestamp counts nanoseconds: the schema wins over the flavor's default.
    fields = [
        _field("id", "int32"),
        _field("created", "int64", "io.debezium.time.Timestamp"),
        _field("updated", "int64", "io.debezium.time.NanoTimestamp"),
        _field("born", "int32", "org.apache.kafka.connect.data.Date"),
        _field("opens", "int32", "io.debezium.time.Time"),
    ]
    at = dt.datetime(2024, 3, 1, 12, 30, 45, 123000)
    row = {
        "id": 1,
        "created": micros(at) // 1000,
        "updated": micros(CREATED) * 1000,
        "born": (BORN - dt.date(1970, 1, 1)).days,
        "opens": 9 * 3600 * 1000 + 5,
    }
    bad = {**row, "id": 2, "updated": micros(CREATED) * 1000 + 7}  # finer than a microsecond
    events = [{"schema": schema(fields), "payload": envelope("c", None, r, 1)} for r in (row, bad)]
    out = decode(events, json_flavor="debezium_postgres")
    got = rows(out)
    assert [r["id"] for r in got] == [1]
    assert got[0]["created"] == at
    assert got[0]["updated"] == CREATED
    assert got[0]["born"] == BORN
    assert got[0]["opens"] == dt.time(9, 0, 0, 5000)
    assert "column 'updated'" in errors(out)[2] and "NanoTimestamp" in errors(out)[2]


def test_flavors_differ_on_bare_timestamps() -> None:
    at = dt.datetime(2024, 3, 1, 12, 30, 45, 123000)
    event = envelope("c", None, {"id": 1, "created": micros(at) // 1000}, 1)  # MySQL DATETIME
    assert rows(decode([event], json_flavor="debezium_mysql"))[0]["created"] == at
    pg = envelope("c", None, {"id": 1, "created": micros(at)}, 1)  # PostgreSQL timestamp(6)
    assert rows(decode([pg], json_flavor="debezium_postgres"))[0]["created"] == at


def test_decimal_text_and_numbers_of_other_decimal_handling_modes() -> None:
    events = [
        envelope("c", None, {"id": 1, "price": "12.50"}, 1),  # decimal.handling.mode=string
        envelope("c", None, {"id": 2, "price": 12.5}, 2),  # decimal.handling.mode=double
    ]
    got = rows(decode(events, json_flavor="debezium_postgres"))
    assert [r["price"] for r in got] == [Decimal("12.50"), Decimal("12.50")]


def test_values_that_cannot_be_decoded_are_dead_letters() -> None:
    good = after(1)
    events = [
        envelope("c", None, {**good, "id": 1, "price": "not a number!"}, 1),
        wrapped(envelope("c", None, {**good, "id": 2, "price": "%%%"}, 2)),
        envelope("c", None, {**good, "id": 3, "born": 10**9}, 3),  # beyond year 9999
        envelope("c", None, {**good, "id": 4, "price": unscaled(Decimal("123456789.5"), 2)}, 4),
        envelope("c", None, {**good, "id": 5}, 5),
    ]
    out = decode(events, json_flavor="debezium_postgres")
    assert [r["id"] for r in rows(out)] == [5]
    found = errors(out)
    assert sorted(found) == [1, 2, 3, 4]
    assert "column 'price' (DECIMAL(10, 2))" in found[1]
    assert "column 'price'" in found[2] and "Decimal" in found[2]
    assert "column 'born' (DATE)" in found[3]
    assert "column 'price'" in found[4] and "123456789.5" in found[4]


def test_epoch_numbers_are_not_dates_without_a_debezium_flavor_or_schema() -> None:
    out = decode([EVENTS[1]])  # json_flavor: default, no schema
    assert rows(out) == []
    assert "column 'born' (DATE)" in errors(out)[1]


def test_changes_into_a_table_without_a_key_are_dead_letters() -> None:
    out = decode(EVENTS, keyed=False, json_flavor="debezium_postgres")
    assert [r["id"] for r in rows(out)] == [1, 2]  # snapshot reads and creates append
    found = errors(out)
    assert sorted(found) == [3, 4, 5]
    for n, what in ((3, "an update"), (4, "a delete"), (5, "a truncate")):
        assert found[n].startswith(what)
        assert "table customers, which has no primary key" in found[n]


def test_events_that_are_not_changes_are_dead_letters() -> None:
    out = decode(
        [
            {"op": "m", "ts_ms": 1, "message": {"prefix": "x", "content": "eA=="}},
            {"id": 1, "first_name": "a row, not an event"},
            {"schema": None, "payload": None},
            envelope("d", None, None, 9),
            envelope("u", None, None, 9),
            envelope("c", None, {"id": 7}, 10),
        ]
    )
    assert [r["id"] for r in rows(out)] == [7]
    found = errors(out)
    assert sorted(found) == [1, 2, 3, 4, 5]
    assert "logical decoding message" in found[1]
    assert "update_format: raw" in found[2]
    assert "payload" in found[3]
    assert "'before'" in found[4] and "REPLICA IDENTITY" in found[4]
    assert "'after'" in found[5]


def test_kafka_tombstones_are_no_records() -> None:
    class Message:  # what confluent-kafka's Message gives kafka_input: value() or None
        def __init__(self, value: bytes | None) -> None:
            self._value = value

        def value(self) -> bytes | None:
            return self._value

    # Debezium sends a tombstone (a message without a value) after each delete.
    messages = [
        Message(json.dumps(wrapped(EVENTS[3])).encode()),
        Message(None),
        Message(json.dumps(EVENTS[1]).encode()),
        Message(b""),
    ]
    data = _values(messages)
    fmt = JsonFormat(JsonConfig(update_format="debezium", json_flavor="debezium_postgres"), table())
    out = list(fmt.decode(iter([data]), final=True, first_record=1, at_start=False))
    assert errors(out) == {}
    assert [(r["id"], r[OP]) for r in rows(out)] == [(2, DELETE), (2, UPSERT)]
    assert sum(d.records for d in out) == 2


def test_json_flavor_and_operation_column_fit_their_update_format() -> None:
    with pytest.raises(ValidationError, match="applies to update_format: debezium"):
        JsonConfig(json_flavor="debezium_postgres")
    with pytest.raises(ValidationError, match="applies to update_format: raw"):
        JsonConfig(update_format="debezium", operation_column="op")


@pytest.mark.parametrize("compact", [True, False], ids=["converter-spacing", "spaced"])
def test_each_event_is_read_by_its_own_schema_when_the_schema_changes(compact: bool) -> None:
    # The same column first as a precise Decimal (base64), then, after the connector was
    # reconfigured with decimal.handling.mode=string, as plain text; then precise again.
    as_text = [f if f["field"] != "price" else _field("price", "string") for f in ROW_FIELDS]
    events = [
        {"schema": schema(), "payload": envelope("c", None, after(1), 1)},
        {"schema": schema(), "payload": envelope("c", None, after(2), 2)},
        {"schema": schema(as_text), "payload": envelope("c", None, {"id": 3, "price": "7.25"}, 3)},
        {"schema": schema(), "payload": envelope("c", None, after(4), 4)},
    ]
    separators = (",", ":") if compact else (", ", ": ")
    text = b"".join(json.dumps(e, separators=separators).encode() + b"\n" for e in events)
    fmt = JsonFormat(JsonConfig(update_format="debezium"), table())
    out = list(fmt.decode(iter([text]), final=True, first_record=1, at_start=True))
    assert errors(out) == {}
    got = rows(out)
    assert [(r["id"], r["price"]) for r in got] == [
        (1, Decimal("1234.56")),
        (2, Decimal("1234.56")),
        (3, Decimal("7.25")),
        (4, Decimal("1234.56")),
    ]
    check_row(got[3], "Anne")


def test_an_unavailable_value_makes_a_partial_update() -> None:
    """Under PostgreSQL's default REPLICA IDENTITY an update that leaves a TOASTed value
    unchanged carries Debezium's placeholder for it: the update sets the other columns
    only (the table keeps the value), never the placeholder text."""
    from airflow_connectors.changes import SET, UPDATE

    row = after(1, "Anne Marie")
    row["doc"] = "__debezium_unavailable_value"
    got = rows(decode([envelope("u", None, row, 300)], json_flavor="debezium_postgres"))
    assert got[0][OP] == UPDATE
    assert "doc" not in got[0][SET] and "first_name" in got[0][SET] and "id" in got[0][SET]
    assert got[0]["doc"] is None and got[0]["first_name"] == "Anne Marie"
    whole = rows(decode([envelope("u", None, after(1), 300)], json_flavor="debezium_postgres"))
    assert whole[0][OP] == UPSERT
