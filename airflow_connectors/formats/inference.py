"""Schema inference, the formats' side: the fields a sampled object holds and their
SQL types, merged across records and objects.

The engine (:mod:`airflow_connectors.engine.schema`) samples the objects a connector
lists and hands each one's bytes to its format's
:meth:`~airflow_connectors.formats.base.Format.infer_fields`, which adds the fields it
finds to one :class:`InferredFields`. The merge rules live here, once for every format:
a field whose values are only null is VARCHAR; integers of different widths take the
wider one; integers and floats make DOUBLE; DATE and TIMESTAMP make TIMESTAMP; a text
format's (CSV's) fields of different kinds are VARCHAR; nested values or conflicting
kinds have no SQL type the formats could read them into, and inference fails with one
line naming the table, the field and an object where it was seen, asking for a
``schema_hints`` entry (a hinted field is not inferred) or declared columns. Nothing is
typed by guessing.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import TYPE_CHECKING, Any

from airflow_connectors.spec.models import ColumnSpec
from airflow_connectors.spec.types import SqlType

if TYPE_CHECKING:
    import pyarrow as pa


class SchemaInferenceError(ValueError):
    """The sample cannot be typed: one line naming the table, the field or object, what
    was found and what to do."""


class InferredFields:
    """The fields seen so far with their types, merged across records and objects: what
    a format's :meth:`~airflow_connectors.formats.base.Format.infer_fields` adds to, for
    every sampled object in turn."""

    def __init__(self, where: str, hinted: set[str], *, text: bool) -> None:
        self.where = where
        #: The format's values are text (CSV): fields of different kinds become VARCHAR.
        self.text = text
        self.hinted = {h.lower() for h in hinted}
        #: Strings per folded field name, typed together at the end (:meth:`columns`).
        self.strings: dict[str, list[str]] = {}
        self.order: dict[str, str] = {}  # folded name -> name as first seen
        self.types: dict[str, SqlType | None] = {}  # None: only nulls so far
        self.seen_in: dict[str, str] = {}

    def add(self, name: str, sql_type: SqlType | None, key: str, what: str = "") -> None:
        """Merge one field's type (None: a null) seen in object ``key``."""
        folded = name.lower()
        if folded not in self.order:
            if not name.strip():
                raise SchemaInferenceError(
                    f"{self.where}: {key} has a field with an empty name; give the field a "
                    "name or declare the table's columns"
                )
            self.order[folded] = name
            self.types[folded] = None
            self.seen_in[folded] = key
        elif self.order[folded] != name:
            raise SchemaInferenceError(
                f"{self.where}: fields {self.order[folded]!r} and {name!r} ({key}) differ only "
                "in case; Spark and DuckDB read column names case-insensitively: rename one "
                "or declare the table's columns"
            )
        if folded in self.hinted:
            return
        if what:
            self._untypable(name, key, what)
        self.types[folded] = self._merge(name, self.types[folded], sql_type, key)

    def add_string(self, name: str, value: str, key: str) -> None:
        """A string value of a format without dates and times of its own (JSON): the
        field is DATE when all its strings are ``YYYY-MM-DD``, TIMESTAMP when all are
        ISO 8601 date-times, else VARCHAR, decided once every object is sampled."""
        self.add(name, None, key)
        self.strings.setdefault(name.lower(), []).append(value)

    def add_arrow(self, schema: pa.Schema, key: str) -> None:
        """Every field of an Arrow schema (Parquet, CSV)."""
        for fld in schema:
            t, what = arrow_to_sql(fld.type)
            self.add(fld.name, t, key, what)

    def _untypable(self, name: str, key: str, what: str) -> None:
        raise SchemaInferenceError(
            f"{self.where}: field {name!r} holds {what} in {key}, which no column type "
            f"holds; set its type in schema_hints (e.g. schema_hints: {{{name}: VARCHAR}}) "
            "or declare the table's columns"
        )

    def _merge(self, name: str, a: SqlType | None, b: SqlType | None, key: str) -> SqlType | None:
        if a is None or a == b:
            return b
        if b is None:
            return a
        numeric = ("TINYINT", "SMALLINT", "INT", "BIGINT", "REAL", "DOUBLE")
        if a.kind in numeric and b.kind in numeric:
            if a.is_integer and b.is_integer:
                return max(a, b, key=lambda t: numeric.index(t.kind))
            return SqlType("DOUBLE")
        if {a.kind, b.kind} == {"DATE", "TIMESTAMP"}:
            return SqlType("TIMESTAMP")
        if self.text:
            return SqlType("VARCHAR")  # any CSV field is VARCHAR text
        if a.kind == "DECIMAL" and b.kind == "DECIMAL":
            scale = max(a.scale or 0, b.scale or 0)
            whole = max((a.precision or 0) - (a.scale or 0), (b.precision or 0) - (b.scale or 0))
            return SqlType("DECIMAL", min(38, whole + scale), scale)
        raise SchemaInferenceError(
            f"{self.where}: field {name!r} is {a} in {self.seen_in[name.lower()]} but {b} in "
            f"{key}; set its type in schema_hints (e.g. schema_hints: {{{name}: VARCHAR}}) or "
            "declare the table's columns"
        )

    def columns(self) -> list[ColumnSpec]:
        """The inferred columns in order of first appearance; only-null fields are
        VARCHAR; hinted fields get their hint later (``engine.schema.apply_hints``)."""
        for folded, values in self.strings.items():
            self.add(self.order[folded], _string_type(values), self.seen_in[folded])
        self.strings = {}
        return [
            ColumnSpec(name=name, type=self.types[folded] or SqlType("VARCHAR"), nullable=True)
            for folded, name in self.order.items()
        ]


def arrow_to_sql(t: pa.DataType) -> tuple[SqlType | None, str]:
    """The SQL type of an Arrow type, or (None, what it is) when no column type holds
    it; (None, "") for the null type."""
    import pyarrow as pa

    checks: list[tuple[Any, str]] = [
        (pa.types.is_boolean, "BOOLEAN"),
        (pa.types.is_int8, "TINYINT"),
        (pa.types.is_int16, "SMALLINT"),
        (pa.types.is_uint8, "SMALLINT"),
        (pa.types.is_int32, "INT"),
        (pa.types.is_uint16, "INT"),
        (pa.types.is_int64, "BIGINT"),
        (pa.types.is_uint32, "BIGINT"),
        (pa.types.is_float16, "REAL"),
        (pa.types.is_float32, "REAL"),
        (pa.types.is_float64, "DOUBLE"),
        (pa.types.is_string, "VARCHAR"),
        (pa.types.is_large_string, "VARCHAR"),
        (pa.types.is_binary, "VARCHAR"),
        (pa.types.is_large_binary, "VARCHAR"),
        (pa.types.is_date, "DATE"),
        (pa.types.is_time, "TIME"),
        (pa.types.is_timestamp, "TIMESTAMP"),
    ]
    if pa.types.is_dictionary(t):
        return arrow_to_sql(t.value_type)
    if pa.types.is_null(t):
        return None, ""
    for check, kind in checks:
        if check(t):
            return SqlType(kind), ""
    if pa.types.is_uint64(t):
        return SqlType("DECIMAL", 20, 0), ""
    if pa.types.is_decimal(t) and t.precision <= 38:
        return SqlType("DECIMAL", t.precision, t.scale), ""
    return None, f"values of type {t}"


# --- strings of formats without dates and times (JSON) ---------------------------

_DATE = re.compile(r"^\d{4}-\d\d-\d\d$")
_DATETIME = re.compile(
    r"^\d{4}-\d\d-\d\d(?:[T ]\d\d:\d\d(?::\d\d(?:\.\d{1,6})?)?(?:Z|[+-]\d\d(?::?\d\d)?)?)?$"
)


def _string_type(values: list[str]) -> SqlType:
    def all_match(pattern: re.Pattern[str], parse: Any) -> bool:
        for v in values:
            if not pattern.match(v):
                return False
            try:
                parse(v)
            except ValueError:
                return False
        return True

    if all_match(_DATE, dt.date.fromisoformat):
        return SqlType("DATE")
    if all_match(_DATETIME, dt.datetime.fromisoformat):  # also a date alone: midnight
        return SqlType("TIMESTAMP")
    return SqlType("VARCHAR")
