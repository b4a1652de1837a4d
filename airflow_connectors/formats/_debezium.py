"""Debezium change events (json ``update_format: debezium``) as change records.

An event is Debezium's envelope ``{"before": {...}, "after": {...}, "op": ..., "source":
{...}, "ts_ms": ...}``, either bare (Kafka Connect's JsonConverter with
``schemas.enable=false``) or wrapped as ``{"schema": {...}, "payload": <envelope>}``
(``schemas.enable=true``, Feldera's ``json_flavor: kafka_connect_json_converter``); both
are recognised record by record. Operations:

- ``c`` (create), ``r`` (read: a snapshot row) and ``u`` (update): an upsert of
  ``after``, the whole new row;
- ``d`` (delete): a delete of the key in ``before`` (under PostgreSQL's default
  ``REPLICA IDENTITY`` only the key columns of ``before`` are set);
- ``t`` (truncate): every row the table holds before it goes.

Any other ``op`` (``m``, a logical decoding message, belongs to no table) is the
record's error. A Kafka tombstone (the message without a value Debezium sends after a
delete) never reaches the format: ``kafka_input`` skips messages without a value, so it
is no record and no error. ``u``, ``d`` and ``t`` into a table without a
``primary_key`` are the record's error (a row would otherwise be appended again, or a
delete lost).

Values. Debezium encodes temporal and decimal values as numbers and base64 text. Where
the event carries its schema, the field's logical type says how:
``io.debezium.time.Date`` and Connect's ``Date`` are days since 1970-01-01;
``io.debezium.time.Time``/``MicroTime``/``NanoTime`` (Connect's ``Time``: millis) are
milli-, micro- and nanoseconds past midnight; ``io.debezium.time.Timestamp``/
``MicroTimestamp``/``NanoTimestamp`` (Connect's ``Timestamp``: millis) are milli-,
micro- and nanoseconds since the epoch, in UTC; ``ZonedTimestamp`` and ``ZonedTime``
are ISO 8601 text (converted to UTC); Connect's ``Decimal`` is the base64 of the
big-endian two's-complement unscaled value with the schema's ``scale`` (or a number:
``decimal.format=NUMERIC``), and ``io.debezium.data.VariableScaleDecimal`` is
``{"scale": s, "value": base64}``. Without a schema, ``json_flavor`` gives the default
encodings of the connector's default settings (``time.precision.mode=adaptive``,
``decimal.handling.mode=precise``): an integer in a DATE column is days; in a TIME
column microseconds; in a TIMESTAMP column microseconds for ``debezium_postgres``
(PostgreSQL's ``timestamp`` is ``timestamp(6)``: ``MicroTimestamp``) and milliseconds
for ``debezium_mysql`` (``DATETIME`` is ``DATETIME(0)``: ``Timestamp``); text in a
DECIMAL column is base64 with the column's scale (text that is not base64, such as
``"12.50"`` of ``decimal.handling.mode=string``, is read as a decimal number: a
string-mode value that happens to be valid base64, such as ``"1234"``, is misread, so
use the schema wrapper with ``decimal.handling.mode=string``). With ``json_flavor:
default`` and no schema, values are read as plain JSON values. Booleans, JSON
(``io.debezium.data.Json``) and other text stay as they are. The values then become
column values by the one rule of :mod:`._conform`; a value that cannot be decoded is
its record's error.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import re
from collections.abc import Iterator
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from airflow_connectors.formats._conform import RowError, mismatch, show

if TYPE_CHECKING:
    import pyarrow as pa

    from airflow_connectors.spec.models import ColumnSpec, TableSpec

_EPOCH = dt.datetime(1970, 1, 1)
_DAY0 = dt.date(1970, 1, 1)
#: Logical type -> (kind of value, units per second), for integer values.
_DATES = {"io.debezium.time.Date", "org.apache.kafka.connect.data.Date"}
_TIMES = {
    "io.debezium.time.Time": 1_000,
    "org.apache.kafka.connect.data.Time": 1_000,
    "io.debezium.time.MicroTime": 1_000_000,
    "io.debezium.time.NanoTime": 1_000_000_000,
}
_STAMPS = {
    "io.debezium.time.Timestamp": 1_000,
    "org.apache.kafka.connect.data.Timestamp": 1_000,
    "io.debezium.time.MicroTimestamp": 1_000_000,
    "io.debezium.time.NanoTimestamp": 1_000_000_000,
}
_ZONED = {"io.debezium.time.ZonedTimestamp", "io.debezium.time.ZonedTime"}
_DECIMAL = "org.apache.kafka.connect.data.Decimal"
_VARIABLE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
#: The operations a table takes from each ``op``.
_UPSERTS = ("c", "r", "u")
FLAVORS = ("default", "debezium_postgres", "debezium_mysql", "kafka_connect_json_converter")


class DebeziumEvents:
    """Turns the Debezium events of a block of JSON text into a table of the events'
    rows (the table's columns, and the fields it lacks when ``extras``) with
    :data:`~airflow_connectors.changes.OP`, ready for :func:`._conform.conform`."""

    def __init__(self, table: TableSpec, flavor: str, *, extras: bool, skip: set[str]) -> None:
        self.table = table
        self.flavor = flavor
        self.extras = extras
        #: Columns not read from events (``_rescued_data`` is made, not read).
        self.columns = [c for c in table.columns if c.name not in skip]
        #: Whether integers and text are decoded by Debezium's defaults without a schema.
        self.defaults = flavor in ("debezium_postgres", "debezium_mysql")
        self.stamp_units = 1_000 if flavor == "debezium_mysql" else 1_000_000
        self.reader = _EventReader()
        self._schema: Any = None  # the last schema seen and its field schemas by part
        self._fields: dict[str, dict[str, dict[str, Any]]] = {}

    def rows(self, data: bytes) -> pa.Table:
        """The events of ``data`` (one or more JSON values), one row each. Raises
        :class:`RowError` (or ``ValueError`` for text that is not JSON) naming what is
        wrong; callers isolate the bad event."""
        import pyarrow as pa

        from airflow_connectors.changes import OP, SET, op_type, set_type

        events = list(self.reader.values(data.decode("utf-8")))
        ops: list[int] = []
        sets: list[list[str] | None] = []
        values: dict[str, list[Any]] = {c.name: [] for c in self.columns}
        extra: dict[str, list[Any]] = {}
        for i, event in enumerate(events):
            op, row, schema = self._change(event)
            op, row, sets_now = self._partial(op, row)
            ops.append(op)
            sets.append(sets_now)
            for col in self.columns:
                value = row.get(col.name)
                if value is not None:
                    value = self._value(col, value, schema.get(col.name))
                values[col.name].append(value)
            if self.extras:
                for name, value in row.items():
                    if name not in values:
                        extra.setdefault(name, [None] * i).append(value)
                for seen in extra.values():
                    if len(seen) <= i:
                        seen.append(None)
        arrays: dict[str, pa.Array] = {}
        for col in self.columns:
            arrays[col.name] = _array(col.name, values[col.name], col)
        for name, seen in extra.items():
            arrays[name] = _array(name, seen, None)
        arrays[OP] = pa.array(ops, op_type())
        if any(s is not None for s in sets):
            arrays[SET] = pa.array(sets, set_type())
        return pa.table(arrays)

    def _partial(
        self, op: int, row: dict[str, Any]
    ) -> tuple[int, dict[str, Any], list[str] | None]:
        """``(op, row, columns set)``: an upsert holding values Debezium could not read
        (an unchanged TOASTed value under the default REPLICA IDENTITY) is a partial
        update of the columns it does carry, the others left out of the row; other
        changes set no column list."""
        from airflow_connectors.changes import UPDATE, UPSERT

        if op != UPSERT:
            return op, row, None
        kept = [c.name for c in self.columns if not _unavailable(row.get(c.name))]
        if len(kept) == len(self.columns):
            return op, row, None
        gone = {c.name for c in self.columns} - set(kept)
        return UPDATE, {k: v for k, v in row.items() if k not in gone}, kept

    def _change(self, event: Any) -> tuple[int, dict[str, Any], dict[str, dict[str, Any]]]:
        """(operation, the row's fields, the row's field schemas by name) of ``event``."""
        from airflow_connectors.changes import DELETE, TRUNCATE, UPSERT

        if not isinstance(event, dict):
            raise RowError(
                f"expected a Debezium change event (a JSON object with op, before and "
                f"after), got {_kind(event)}"
            )
        schema: Any = None
        if "op" not in event and "payload" in event:  # the JsonConverter's schema wrapper
            schema, event = event.get("schema"), event["payload"]
            if not isinstance(event, dict):
                raise RowError(
                    f"expected a Debezium change event as the payload, got {_kind(event)}"
                )
        op = event.get("op")
        if op not in (*_UPSERTS, "d", "t"):
            if op is None:
                raise RowError(
                    "not a Debezium change event: no 'op' field (for plain rows set format "
                    'config update_format: raw; for {"insert": {...}} records, insert_delete)'
                )
            hint = " (a logical decoding message, not a change of a table)" if op == "m" else ""
            raise RowError(f"unknown Debezium operation op={_show(op)}{hint}")
        if op != "c" and op != "r" and not self.table.keyed:
            what = {"u": "an update", "d": "a delete", "t": "a truncate"}[op]
            raise RowError(
                f"{what} (Debezium op {op}) cannot be applied to table {self.table.name}, "
                "which has no primary key; declare the table's primary_key (its rows are "
                "then upserted and deleted by key)"
            )
        if op == "t":
            return TRUNCATE, {}, {}
        part = "before" if op == "d" else "after"
        row = event.get(part)
        if not isinstance(row, dict):
            why = (
                "; the source table's REPLICA IDENTITY must give the key in before"
                if op == "d"
                else ""
            )
            raise RowError(f"Debezium op {op} without a {part!r} row (got {_kind(row)}){why}")
        if schema is not self._schema:  # events of one schema share its parsed object
            self._schema, self._fields = schema, {}
        if part not in self._fields:
            self._fields[part] = _field_schemas(schema, part)
        return (DELETE if op == "d" else UPSERT), row, self._fields[part]

    def _value(self, col: ColumnSpec, value: Any, schema: dict[str, Any] | None) -> Any:
        """``value`` of ``col`` decoded from Debezium's encoding to a plain JSON value
        (text for dates, times, timestamps and decimals), which :mod:`._conform` reads."""
        name = schema.get("name") if schema else None
        try:
            if name is not None:
                return _by_logical_type(name, value, schema or {}, col)
            if self.defaults:
                return self._by_default(col, value)
        except (ValueError, OverflowError, binascii.Error, ArithmeticError) as e:
            where = f" ({name})" if name else ""
            raise RowError(
                mismatch(col, f"{show(value)}{where}, which cannot be decoded: {e}")
            ) from None
        return value

    def _by_default(self, col: ColumnSpec, value: Any) -> Any:
        """``value`` by the flavor's default encoding for ``col``'s type (no schema)."""
        kind = col.type.kind
        if isinstance(value, int) and not isinstance(value, bool):
            if kind == "DATE":
                return _date(value)
            if kind == "TIME":
                return _time(value, 1_000_000)
            if kind == "TIMESTAMP":
                return _stamp(value, self.stamp_units)
        if kind == "TIME" and isinstance(value, str):
            return value.removesuffix("Z")  # ZonedTime, in UTC
        if kind == "DECIMAL":
            if isinstance(value, dict):
                return _variable_decimal(value)
            if isinstance(value, str):
                return _base64_or_text(value, col.type.scale or 0)
        return value


def _by_logical_type(name: str, value: Any, schema: dict[str, Any], col: ColumnSpec) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        if name in _DATES:
            return _date(value)
        if name in _TIMES:
            return _time(value, _TIMES[name])
        if name in _STAMPS:
            return _stamp(value, _STAMPS[name])
    if name == "io.debezium.time.ZonedTime" and isinstance(value, str):
        return value.removesuffix("Z")
    if name == _DECIMAL:
        if isinstance(value, str):
            params = schema.get("parameters") or {}
            return _unscaled(value, int(params.get("scale", col.type.scale or 0)))
        if isinstance(value, int | float) and not isinstance(value, bool):
            return repr(value) if isinstance(value, float) else str(value)
    if name == _VARIABLE_DECIMAL and isinstance(value, dict):
        return _variable_decimal(value)
    return value


def _date(days: int) -> str:
    return (_DAY0 + dt.timedelta(days=days)).isoformat()


def _time(count: int, per_second: int) -> str:
    micros = _micros(count, per_second)
    if not 0 <= micros < 86_400_000_000:
        raise ValueError(f"{count} is not a time of day in units of 1/{per_second} s")
    return (_EPOCH + dt.timedelta(microseconds=micros)).time().isoformat()


def _stamp(count: int, per_second: int) -> str:
    return (_EPOCH + dt.timedelta(microseconds=_micros(count, per_second))).isoformat()


def _micros(count: int, per_second: int) -> int:
    if per_second <= 1_000_000:
        return count * (1_000_000 // per_second)
    whole, rest = divmod(count, per_second // 1_000_000)
    if rest:
        raise ValueError("nanoseconds beyond the microseconds a column holds")
    return whole


def _unscaled(text: str, scale: int) -> str:
    raw = base64.b64decode(text, validate=True)
    if not raw:
        raise ValueError("empty bytes")
    return str(Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-scale))


def _variable_decimal(value: dict[str, Any]) -> str:
    scale, digits = value.get("scale"), value.get("value")
    if not isinstance(scale, int) or not isinstance(digits, str):
        raise ValueError('expected {"scale": <int>, "value": <base64>} (VariableScaleDecimal)')
    return _unscaled(digits, scale)


def _base64_or_text(text: str, scale: int) -> str:
    try:
        return _unscaled(text, scale)
    except (ValueError, binascii.Error):
        Decimal(text)  # not base64: decimal text (decimal.handling.mode=string), or an error
        return text


def _field_schemas(schema: Any, part: str) -> dict[str, dict[str, Any]]:
    """The field schemas of the envelope's ``part`` (``before``/``after``) by field
    name, from the JsonConverter's ``schema`` (empty without one)."""
    if not isinstance(schema, dict):
        return {}
    for fld in schema.get("fields") or ():
        if isinstance(fld, dict) and fld.get("field") == part:
            return {str(f.get("field")): f for f in fld.get("fields") or () if isinstance(f, dict)}
    return {}


def _array(name: str, values: list[Any], col: ColumnSpec | None) -> pa.Array:
    import pyarrow as pa

    if col is not None and col.type.kind == "DECIMAL":
        values = [v if v is None or isinstance(v, str) else _plain_text(v) for v in values]
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError) as e:
        present = [v for v in values if v is not None]
        if len(present) == 1 and col is not None:
            raise RowError(mismatch(col, show(present[0]))) from None
        what = f"column {name!r}" if col is not None else f"field {name!r}"
        raise ValueError(f"{what}: values of different kinds ({e})") from None


def _plain_text(value: Any) -> Any:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return repr(value) if isinstance(value, float) else str(value)
    return value


_SCHEMA_KEY = re.compile(r'\{\s*"schema"\s*:\s*')
_PAYLOAD_KEY = re.compile(r'\s*,\s*"payload"\s*:\s*')
_SPACE = re.compile(r"[ \t\r\n]*")
_CLOSE = re.compile(r"[ \t\r\n]*\}")


class _EventReader:
    """The JSON values of a text, one after another. The JsonConverter's wrapper repeats
    the same schema (most of an event's bytes) in every event: where an event starts
    with the very text of the previous event's schema, only its payload is parsed, and
    it shares the schema object parsed before."""

    def __init__(self) -> None:
        self.decoder = json.JSONDecoder()
        self.prefix = ""  # '{"schema": <the last schema's text>, "payload": '
        self.schema: Any = None

    def values(self, text: str) -> Iterator[Any]:
        """The values of ``text``; raises ``ValueError`` where it is not JSON."""
        pos, n = 0, len(text)
        while True:
            pos = _SPACE.match(text, pos).end()  # type: ignore[union-attr]
            if pos >= n:
                return
            if self.prefix and text.startswith(self.prefix, pos):
                payload, end = self.decoder.raw_decode(text, pos + len(self.prefix))
                close = _CLOSE.match(text, end)
                if close is not None:
                    pos = close.end()
                    yield {"schema": self.schema, "payload": payload}
                    continue
            value, end = self.decoder.raw_decode(text, pos)
            if isinstance(value, dict) and "payload" in value:
                self._remember(text, pos, value)
            pos = end
            yield value

    def _remember(self, text: str, pos: int, value: dict[str, Any]) -> None:
        """Keep the text of ``value``'s schema when it comes first (as the JsonConverter
        writes it)."""
        key = _SCHEMA_KEY.match(text, pos)
        if key is None or list(value)[:2] != ["schema", "payload"]:
            return
        _, schema_end = self.decoder.raw_decode(text, key.end())
        after = _PAYLOAD_KEY.match(text, schema_end)
        if after is not None:
            self.prefix, self.schema = text[pos : after.end()], value["schema"]


#: What Debezium writes for a value it could not read (``unavailable.value.placeholder``
#: by default; base64 of it for a binary column).
UNAVAILABLE = "__debezium_unavailable_value"
_UNAVAILABLE_FORMS = frozenset({UNAVAILABLE, "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ=="})


def _unavailable(value: Any) -> bool:
    """Whether ``value`` is Debezium's placeholder for a value it could not read (also
    as the one element of an array column's value)."""
    if isinstance(value, str):
        return value in _UNAVAILABLE_FORMS
    return isinstance(value, list) and len(value) == 1 and value[0] in _UNAVAILABLE_FORMS


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return show(value)


def _show(value: Any) -> str:
    return json.dumps(value)[:100]
