"""Validate a spec document (the parsed YAML/JSON, or SQL text) into a
:class:`PipelineSpec`.

Validation collects every problem at once. Each problem carries the JSON path of the
field and a message a user can act on (see :mod:`.errors`).

The transports, formats and sinks a spec names are looked up in the :class:`Plugins`
the caller passes: the spec layer sits below the plugins and imports none of them
(:mod:`airflow_connectors.catalog` passes the installed ones).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from airflow_connectors.changes import CHANGE_COLUMNS
from airflow_connectors.spec.errors import (
    SpecError,
    SpecValidationError,
    describe,
    did_you_mean,
    path_str,
    unknown_field,
    validated,
)
from airflow_connectors.spec.graph import start_after_errors
from airflow_connectors.spec.models import (
    LABEL_RULE,
    NAME_RULE,
    ColumnSpec,
    ConnectorSpec,
    PipelineSpec,
    SchemaEvolution,
    SinkSpec,
    TableSpec,
    is_valid_column_name,
    is_valid_label,
    is_valid_name,
    parse_duration,
)
from airflow_connectors.spec.plugins import Plugins

M = TypeVar("M", bound=BaseModel)

PIPELINE_KEYS = ("pipeline", "tables", "sql")
#: The fields of a keyed table (``TableSpec.primary_key`` and the fields it enables).
KEY_FIELDS = ("primary_key", "sequence_by", "scd_type", "tombstone_retention")
TABLE_KEYS = (
    "columns",
    "sink",
    "connectors",
    "sql",
    "schema_hints",
    "schema_evolution",
    *KEY_FIELDS,
)
#: Column types a key cannot have: two floats that print alike may differ in their last
#: bits, and NaN equals nothing, so a key of them would not find its row again.
UNKEYABLE_TYPES = ("REAL", "DOUBLE")
SCHEMA_EVOLUTION_MODES = ("add_new_columns", "rescue", "fail_on_new_columns", "none")
#: The Parquet sink keeps table ``t``'s dead letters in the folder ``t__errors``.
ERRORS_SUFFIX = "__errors"


#: Feldera transports this release cannot offer yet, with why: no such broker runs where
#: the product is tested, so they would ship untested. A transport can be added as a
#: plugin (docs/extending/writing-a-transport.md).
NOT_YET: dict[str, str] = {
    name: f" ({why}; a transport for it can be added as a plugin: see docs/extending/writing-a-transport.md)"
    for name, why in {
        "pub_sub_input": "Google Pub/Sub is not supported in this release",
        "pubsub_input": "Google Pub/Sub (Feldera's pub_sub_input) is not supported in this release",
        "nexmark": "the Nexmark generator is not supported in this release; datagen generates rows",
    }.items()
}


def parse_pipeline(
    doc: Any,
    *,
    name: str | None = None,
    base_dir: Path | None = None,
    source: str | None = None,
    plugins: Plugins,
) -> PipelineSpec:
    """Validate a spec document (the parsed YAML/JSON) against ``plugins`` and return
    the pipeline. Raises :class:`SpecValidationError` with every problem."""
    return parse_document(doc, name=name, base_dir=base_dir, source=source, plugins=plugins)


def parse_document(
    doc: Any,
    *,
    name: str | None,
    base_dir: Path | None,
    source: str | None,
    plugins: Plugins,
    earlier: Sequence[SpecError] = (),
) -> PipelineSpec:
    """:func:`parse_pipeline`; ``earlier``: problems found while reading the file
    (duplicate keys), reported together with the document's."""
    v = _Validator(base_dir, plugins)
    v.errors.extend(earlier)
    spec = v.pipeline(doc, name, source)
    if v.errors or spec is None:
        raise SpecValidationError(v.errors, source)
    return spec


def validate_pipeline(
    doc: Any,
    *,
    name: str | None = None,
    base_dir: Path | None = None,
    plugins: Plugins,
) -> list[SpecError]:
    """Every problem in ``doc``; empty when it is valid."""
    v = _Validator(base_dir, plugins)
    v.pipeline(doc, name, None)
    return v.errors


def resolve_connector(
    connector: ConnectorSpec,
    table: TableSpec,
    *,
    plugins: Plugins,
    base_dir: Path | None = None,
    check_columns: bool = True,
) -> ConnectorSpec:
    """The connector with its transport and format configs resolved and validated: the
    transport's :meth:`resolve_config` (relative paths taken from ``base_dir``), each
    config checked against its plugin's ``Config`` and the transport against the table's
    columns, and the configs stored as the plugins normalise them.

    The one check of a connector's plugin configs: loading a spec runs it on every
    connector, and the Airflow tasks run it again on the configs as templated for their
    run. Raises :class:`SpecValidationError` whose paths start at the connector
    (``transport.config.path``). ``check_columns=False``: without the checks against
    the table's columns (a connector checked alone, its table unknown)."""
    errors: list[SpecError] = []
    resolved = _resolve_connector(
        connector, table, plugins, base_dir, [], errors, columns_ok=check_columns
    )
    if errors or resolved is None:
        raise SpecValidationError(errors)
    return resolved


class _Validator:
    def __init__(self, base_dir: Path | None, plugins: Plugins) -> None:
        self.base_dir = base_dir
        self.plugins = plugins
        self.errors: list[SpecError] = []
        # Connectors that parsed, even in tables with errors: start_after is checked
        # across all of them so every problem is reported at once.
        self.parsed: list[tuple[str, int, ConnectorSpec]] = []

    def error(self, path: list[str | int], message: str) -> None:
        self.errors.append(SpecError(path_str(path), message))

    def unknown_keys(
        self, path: list[str | int], doc: Mapping[str, Any], allowed: Sequence[str]
    ) -> None:
        for key in doc:
            if key not in allowed:
                self.error([*path, str(key)], unknown_field(str(key), allowed))

    # --- pipeline and tables ------------------------------------------------------

    def pipeline(self, doc: Any, name: str | None, source: str | None) -> PipelineSpec | None:
        if not isinstance(doc, Mapping):
            self.error(
                [], f"expected a mapping with keys {', '.join(PIPELINE_KEYS)}, got {describe(doc)}"
            )
            return None
        self.unknown_keys([], doc, PIPELINE_KEYS)
        name = self.pipeline_name(name or doc.get("pipeline"))
        tables = self.tables(self.table_docs(doc))
        self.errors.extend(start_after_errors(self.parsed))
        if self.errors:
            return None
        return PipelineSpec(name=name, tables=tuple(tables), source=source)

    def pipeline_name(self, name: Any) -> str:
        """``name`` when it is a valid pipeline name; otherwise an error and a stand-in."""
        if not isinstance(name, str) or not is_valid_name(name):
            self.error(["pipeline"], f"expected a pipeline name of {NAME_RULE}, got {name!r}")
            return "invalid"
        return name

    def table_docs(self, doc: Mapping[str, Any]) -> list[tuple[list[str | int], str, Any]]:
        """(path, name, raw table document) of every table, from ``tables`` and then from
        the CREATE TABLE statements of ``sql``."""
        raw_tables: list[tuple[list[str | int], str, Any]] = []
        tables_doc = doc.get("tables", {})
        if not isinstance(tables_doc, Mapping):
            self.error(
                ["tables"], f"expected a mapping of table name -> table, got {describe(tables_doc)}"
            )
            tables_doc = {}
        for tname, tdoc in tables_doc.items():
            raw_tables.append((["tables", str(tname)], str(tname), tdoc))
        if "sql" in doc:
            if not isinstance(doc["sql"], str):
                self.error(
                    ["sql"],
                    f"expected SQL text (CREATE TABLE statements), got {describe(doc['sql'])}",
                )
            else:
                for sql_table in self.sql_tables(doc["sql"], ["sql"]):
                    raw_tables.append((["tables", sql_table["name"]], sql_table["name"], sql_table))
        if not raw_tables:
            self.error(["tables"], "the pipeline has no tables; add 'tables' or 'sql'")
        return raw_tables

    def tables(self, raw_tables: list[tuple[list[str | int], str, Any]]) -> list[TableSpec]:
        """The tables that validate; a name defined twice is an error at its second
        definition."""
        tables: list[TableSpec] = []
        seen: set[str] = set()
        for path, tname, tdoc in raw_tables:
            if tname in seen:
                self.error(path, f"table {tname!r} is defined twice")
                continue
            seen.add(tname)
            table = self.table(path, tname, tdoc)
            if table is not None:
                tables.append(table)
        return tables

    def sql_tables(self, sql: str, path: list[str | int]) -> list[dict[str, Any]]:
        from airflow_connectors.spec.sql import parse_create_tables

        tables, errors = parse_create_tables(sql)
        for where, message in errors:
            self.error(path if where is None else [*path, where], message)
        out = []
        for t in tables:
            for rel, problem in t.errors:
                self.error(["tables", t.name, *rel], problem)
            table: dict[str, Any] = {
                "name": t.name,
                "columns": t.columns,
                "connectors": t.connectors if t.connectors is not None else [],
                "_sql": True,
            }
            if t.primary_key:
                table["primary_key"] = list(t.primary_key)
            out.append(table)
        return out

    def table(self, path: list[str | int], name: str, doc: Any) -> TableSpec | None:
        if not isinstance(doc, Mapping):
            self.error(
                path,
                f"expected a table (columns, connectors, sink) or {{sql: CREATE TABLE ...}}, got {describe(doc)}",
            )
            return None
        if not is_valid_name(name):
            self.error(path, f"table name {name!r} must be {NAME_RULE} (it names folders and DAGs)")
        elif name.lower().endswith(ERRORS_SUFFIX):
            self.error(
                path,
                f"table name {name!r} ends in {ERRORS_SUFFIX!r}, which is reserved: the dead "
                f"letters of table {name[: -len(ERRORS_SUFFIX)]!r} go to the folder "
                f"'{name[: -len(ERRORS_SUFFIX)]}{ERRORS_SUFFIX}'; rename the table",
            )
        if not doc.get("_sql"):
            self.unknown_keys(path, doc, TABLE_KEYS)
        if "sql" in doc:
            sql_doc = self.sql_table(path, name, doc)
            if sql_doc is None:
                return None
            doc = sql_doc
        infers = "columns" not in doc and not doc.get("_sql")
        columns: tuple[ColumnSpec, ...] = ()
        if infers:  # inferred from the data on first discovery
            columns_ok = self.inferable(path, doc.get("connectors"))
        else:
            columns, columns_ok = self.columns(
                [*path, "columns"], doc.get("columns"), from_sql=bool(doc.get("_sql"))
            )
        hints = self.schema_hints([*path, "schema_hints"], doc.get("schema_hints"), infers=infers)
        evolution, evolution_ok = self.schema_evolution(
            [*path, "schema_evolution"], doc.get("schema_evolution")
        )
        sink = self.sink([*path, "sink"], doc.get("sink"))
        keys, keys_ok = self.keys(
            path, name, doc, columns, hints=hints or {}, sink=sink, columns_ok=columns_ok
        )
        # Key columns are NOT NULL, as under SQL's PRIMARY KEY.
        columns = _not_null(columns, keys["primary_key"])
        if not keys_ok:  # the connectors' checks see the key columns the table has
            declared = {c.name for c in columns}
            keys = {
                "primary_key": tuple(
                    k for k in keys["primary_key"] if not declared or k in declared
                )
            }
        # Connectors are checked even when columns or sink are wrong: every problem at once.
        connectors = self.connectors(
            path, name, columns, doc.get("connectors", []), columns_ok=columns_ok, keys=keys
        )
        if connectors is None or not columns_ok or sink is None or hints is None:
            return None
        if not evolution_ok or not keys_ok:
            return None
        return TableSpec(
            name=name,
            columns=columns,
            sink=sink,
            connectors=connectors,
            schema_hints=hints,
            schema_evolution=evolution,
            **keys,
        )

    def sql_table(
        self, path: list[str | int], name: str, doc: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """The raw table document of a table given as ``{sql: CREATE TABLE ...}``, with
        the sink and key fields given beside the statement; None when it is unusable."""
        if "columns" in doc or "connectors" in doc:
            self.error([*path, "sql"], "give either 'sql' or 'columns'/'connectors', not both")
            return None
        parsed = self.sql_tables(str(doc["sql"]), [*path, "sql"])
        if len(parsed) != 1:
            self.error(
                [*path, "sql"],
                f"expected exactly one CREATE TABLE statement, found {len(parsed)}",
            )
            return None
        if parsed[0]["name"] != name.lower() and parsed[0]["name"] != name:
            self.error(
                [*path, "sql"],
                f"CREATE TABLE names {parsed[0]['name']!r} but the table key is {name!r}",
            )
        # Feldera's SQL has no sequence_by (nor the other key fields): they sit beside the
        # statement, as the sink does.
        given = {k: doc[k] for k in KEY_FIELDS if k in doc}
        if "primary_key" in given and "primary_key" in parsed[0]:
            self.error(
                [*path, "primary_key"],
                f"CREATE TABLE {parsed[0]['name']} declares a PRIMARY KEY already; give the "
                "key either in the SQL or as primary_key, not both",
            )
            del given["primary_key"]
        return {**parsed[0], **given, "sink": doc.get("sink")}

    def keys(
        self,
        path: list[str | int],
        table: str,
        doc: Mapping[str, Any],
        columns: tuple[ColumnSpec, ...],
        *,
        hints: Mapping[str, str],
        sink: SinkSpec | None,
        columns_ok: bool,
    ) -> tuple[dict[str, Any], bool]:
        """The table's :data:`KEY_FIELDS` as :class:`TableSpec` takes them (what could be
        read of them, even when some are wrong: the connectors' checks see the key) and
        whether they are all valid.

        Declared columns are checked here: the key and ``sequence_by`` columns must be
        among them, a key column only once and not of a floating-point type. A table
        whose columns are inferred has its key and ``sequence_by`` names checked by the
        engine when it infers them (``engine/schema.py``); here only the types its
        ``schema_hints`` pin for key columns."""
        check_names = columns_ok and bool(columns)
        key, ok = self.primary_key([*path, "primary_key"], doc.get("primary_key"))
        ok = self.key_columns(table, key, columns, hints, check_names=check_names) and ok
        names = tuple(k for k, _ in key)
        keyed = bool(names)
        if keyed and check_names:
            for c in columns:
                if c.name in CHANGE_COLUMNS:
                    self.error(
                        [*path, "columns", c.name],
                        f"column {c.name!r} is reserved in a table with a primary_key (its "
                        f"changes carry {', '.join(CHANGE_COLUMNS)} beside the columns); "
                        "rename the column",
                    )
                    ok = False
        sequence_by, sequence_ok = self.sequence_by(
            [*path, "sequence_by"], table, doc.get("sequence_by"), names, columns, check_names
        )
        ok = sequence_ok and ok
        scd_type, scd_ok = self.scd_type([*path, "scd_type"], table, doc.get("scd_type"), keyed)
        ok = scd_ok and ok
        retention, retention_ok = self.tombstone_retention(
            [*path, "tombstone_retention"], table, doc.get("tombstone_retention"), keyed
        )
        ok = retention_ok and ok
        if keyed and sink is not None:
            # A table of a spec's top-level sql has no place for a sink.
            in_sql = bool(doc.get("_sql")) and "sink" not in doc
            ok = self.key_sink([*path, "primary_key"], table, sink, in_sql=in_sql) and ok
        out: dict[str, Any] = {"primary_key": names, "sequence_by": sequence_by}
        if scd_type is not None:
            out["scd_type"] = scd_type
        if retention is not None:
            out["tombstone_retention"] = retention
        return out, ok

    def key_columns(
        self,
        table: str,
        key: list[tuple[str, list[str | int]]],
        columns: tuple[ColumnSpec, ...],
        hints: Mapping[str, str],
        *,
        check_names: bool,
    ) -> bool:
        """Whether each key column is named once, is declared (when ``check_names``) and
        has a type a key can have (declared, or pinned by a schema hint)."""
        ok = True
        by_name = {c.name: c for c in columns}
        seen: set[str] = set()
        for kname, kpath in key:
            if kname.lower() in seen:
                self.error(
                    kpath,
                    f"column {kname!r} appears twice in primary_key; name each key column once",
                )
                ok = False
                continue
            seen.add(kname.lower())
            if check_names and kname not in by_name:
                self.error(kpath, self.undeclared("primary_key", kname, table, columns))
                ok = False
                continue
            kind = by_name[kname].type.kind if kname in by_name else _hinted_kind(hints, kname)
            if kind in UNKEYABLE_TYPES:
                self.error(
                    kpath,
                    f"key column {kname!r} is {kind}, and a floating-point column cannot be a "
                    "key (values that print alike may differ in their last bits, NaN equals "
                    "nothing); key on an integer, DECIMAL or VARCHAR column",
                )
                ok = False
        return ok

    def key_sink(self, path: list[str | int], table: str, sink: SinkSpec, *, in_sql: bool) -> bool:
        """Whether the keyed table's sink can apply changes; reports the sinks that can.
        ``in_sql``: the table comes from a spec's top-level ``sql``, which cannot name a
        sink: the remedy says where to give one."""
        if _applies_changes(self.plugins, sink.name):
            return True
        others = [n for n in self.plugins.sinks.names() if _applies_changes(self.plugins, n)]
        first = others[0] if others else "delta"
        where = (
            f"give the table in a YAML spec as tables: {{{table}: {{sql: <its CREATE TABLE>, "
            f"sink: {{name: {first}}}}}}}"
            if in_sql
            else f"give the table a sink that applies changes: sink: {{name: {first}}}"
        )
        self.error(
            path,
            f"table {table!r} has a primary key, and the {sink.name} sink only appends rows "
            f"(it cannot update or delete them); {where}"
            + (f" (or {', '.join(others[1:])})" if len(others) > 1 else "")
            + ", or remove the primary key to append every record",
        )
        return False

    def primary_key(
        self, path: list[str | int], doc: Any
    ) -> tuple[list[tuple[str, list[str | int]]], bool]:
        """``primary_key``: one column name or a list of them, each with the path of
        where it was given; an empty list is no key."""
        if doc is None:
            return [], True
        if isinstance(doc, str):
            items: list[tuple[Any, list[str | int]]] = [(doc, path)]
        elif isinstance(doc, list | tuple):
            items = [(v, [*path, i]) for i, v in enumerate(doc)]
        else:
            self.error(
                path,
                "expected the column that identifies a row, or a list of them, such as "
                f"[id] or [tenant, id]; got {describe(doc)}",
            )
            return [], False
        out: list[tuple[str, list[str | int]]] = []
        ok = True
        for value, vpath in items:
            if not isinstance(value, str) or not is_valid_column_name(value):
                self.error(vpath, f"expected a column name in primary_key, got {describe(value)}")
                ok = False
                continue
            out.append((value, vpath))
        return out, ok

    def undeclared(self, field: str, name: str, table: str, columns: tuple[ColumnSpec, ...]) -> str:
        """The message for a ``field`` naming a column the table does not declare."""
        same = [c.name for c in columns if c.name.lower() == name.lower()]
        hint = (
            f" (did you mean {same[0]!r}?)"
            if same
            else did_you_mean(name, [c.name for c in columns])
        )
        return (
            f"{field} names column {name!r}, which table {table!r} does not declare{hint}; "
            f"its columns: {', '.join(c.name for c in columns)}"
        )

    def sequence_by(
        self,
        path: list[str | int],
        table: str,
        doc: Any,
        key: tuple[str, ...],
        columns: tuple[ColumnSpec, ...],
        check_names: bool,
    ) -> tuple[str | None, bool]:
        """``sequence_by``: a column of a keyed table that is not a key column."""
        if doc is None:
            return None, True
        if not isinstance(doc, str) or not is_valid_column_name(doc):
            self.error(
                path,
                "expected the column that orders two changes of one key (a Kafka offset, an "
                f"LSN, an updated_at), got {describe(doc)}",
            )
            return None, False
        if not key:
            self.error(
                path,
                f"sequence_by orders the changes of one key, and table {table!r} has no "
                "primary_key; add primary_key: [<column>, ...] or remove sequence_by",
            )
            return doc, False
        if check_names and doc not in {c.name for c in columns}:
            self.error(path, self.undeclared("sequence_by", doc, table, columns))
            return doc, False
        if doc.lower() in {k.lower() for k in key}:
            self.error(
                path,
                f"sequence_by column {doc!r} is part of the primary_key, so every change of a "
                "key has the same sequence; name a column that grows with each change (an "
                "offset, an LSN, an updated_at)",
            )
            return doc, False
        return doc, True

    def scd_type(
        self, path: list[str | int], table: str, doc: Any, keyed: bool
    ) -> tuple[int | None, bool]:
        """``scd_type``: 1 or 2; 2 only with a key."""
        if doc is None:
            return None, True
        if isinstance(doc, bool) or doc not in (1, 2):
            self.error(
                path,
                "scd_type must be 1 (the table holds each key's latest row) or 2 (it keeps "
                f"every version of a row), got {describe(doc)}",
            )
            return None, False
        if doc == 2 and not keyed:
            self.error(
                path,
                f"scd_type 2 keeps the history of each key, and table {table!r} has no "
                "primary_key; add primary_key: [<column>, ...] or remove scd_type",
            )
            return int(doc), False
        return int(doc), True

    def tombstone_retention(
        self, path: list[str | int], table: str, doc: Any, keyed: bool
    ) -> tuple[datetime.timedelta | None, bool]:
        """``tombstone_retention``: a positive duration (``"7d"``, ``"12h"``, seconds, or
        ISO 8601 as a stored spec holds it), for a keyed table."""
        if doc is None:
            return None, True
        value: datetime.timedelta | None = None
        if isinstance(doc, datetime.timedelta):
            value = doc
        elif isinstance(doc, str) and not doc.lstrip().upper().startswith("P"):
            try:
                value = parse_duration(doc)
            except ValueError:
                value = None
        elif isinstance(doc, str | int | float) and not isinstance(doc, bool):
            try:
                value = TypeAdapter(datetime.timedelta).validate_python(doc)
            except ValidationError:
                value = None
        if value is None or value.total_seconds() <= 0:
            self.error(
                path,
                "tombstone_retention must be a positive duration such as '7d', '12h' or "
                f"'30m' (how long a deleted key is remembered), got {describe(doc)}",
            )
            return None, False
        if not keyed:
            self.error(
                path,
                f"tombstone_retention applies to deleted keys, and table {table!r} has no "
                "primary_key; add primary_key: [<column>, ...] or remove tombstone_retention",
            )
            return value, False
        return value, True

    def inferable(self, path: list[str | int], doc: Any) -> bool:
        """Whether every connector of a table without ``columns`` reads a format whose
        data names its columns (``infers_schema``) under its config (the format's
        ``inference_problem``: csv only with ``headers: true``); reports those that do
        not."""
        ok = True
        for i, cdoc in enumerate(doc if isinstance(doc, list) else []):
            if not isinstance(cdoc, Mapping):
                continue  # reported with the connectors
            fmt = cdoc.get("format")
            fname = fmt.get("name") if isinstance(fmt, Mapping) else None
            fconfig = fmt.get("config") if isinstance(fmt, Mapping) else None
            cpath: list[str | int] = [*path, "connectors", i, "format"]
            fcls: Any = None
            if isinstance(fname, str) and fname in self.plugins.formats:
                fcls = self.plugins.formats.get(fname)
            if not getattr(fcls, "infers_schema", False):
                what = f"format {fname!r}" if fname else "a connector without a format"
                self.error(
                    cpath,
                    f"the table has no columns, and {what} cannot infer them (inference reads "
                    f"formats {', '.join(self.plugins.inferring_formats())}); declare the "
                    "table's columns",
                )
                ok = False
                continue
            problem = fcls.inference_problem(fconfig if isinstance(fconfig, Mapping) else {})
            if problem is not None:
                field, reason = problem
                self.error(
                    [*cpath, "config", field],
                    f"the table has no columns, and {reason} or declare the table's columns",
                )
                ok = False
        return ok

    def schema_hints(
        self, path: list[str | int], doc: Any, *, infers: bool
    ) -> dict[str, str] | None:
        """``column -> SQL type`` hints, each type checked; None when any is wrong."""
        from airflow_connectors.spec.types import parse_type

        if doc is None:
            return {}
        if not isinstance(doc, Mapping):
            self.error(
                path,
                f"expected a mapping of column name -> SQL type such as {{id: BIGINT}}, got "
                f"{describe(doc)}",
            )
            return None
        if doc and not infers:
            self.error(
                path,
                "schema_hints pin the types of inferred columns, and this table declares its "
                "columns; set the types in 'columns' or omit 'columns' to infer them",
            )
            return None
        out: dict[str, str] = {}
        for cname, ctype in doc.items():
            if not is_valid_column_name(str(cname)):
                self.error([*path, str(cname)], f"schema hint for column {cname!r}: bad name")
                return None
            try:
                parse_type(str(ctype))
            except ValueError as e:
                self.error([*path, str(cname)], f"schema hint for column {cname!r}: {e}")
                return None
            out[str(cname)] = str(ctype)
        return out

    def schema_evolution(
        self, path: list[str | int], doc: Any
    ) -> tuple[SchemaEvolution | None, bool]:
        """The table's ``schema_evolution`` mode (None: the default) and whether it is
        valid."""
        if doc is None or doc in SCHEMA_EVOLUTION_MODES:
            return doc, True
        self.error(
            path,
            f"schema_evolution must be one of {', '.join(SCHEMA_EVOLUTION_MODES)}, got "
            f"{describe(doc)}",
        )
        return None, False

    def columns(
        self, path: list[str | int], doc: Any, *, from_sql: bool
    ) -> tuple[tuple[ColumnSpec, ...], bool]:
        from airflow_connectors.spec.types import parse_type

        if not isinstance(doc, Mapping) or not doc:
            self.error(
                path,
                "expected a mapping of column name -> SQL type, such as {id: BIGINT NOT NULL, name: VARCHAR}",
            )
            return (), False
        out: list[ColumnSpec] = []
        ok = True
        # Spark and DuckDB, which read the tables, resolve column names case-insensitively.
        folded: dict[str, str] = {}
        for cname, ctype in doc.items():
            cname = str(cname)
            if not is_valid_column_name(cname):
                self.error(
                    [*path, cname],
                    f"column name {cname!r} must be at least 1 character, without control "
                    "characters such as a newline",
                )
                ok = False
                continue
            if cname.lower() in folded:
                self.error(
                    [*path, cname],
                    f"column {cname!r} is defined twice (also {folded[cname.lower()]!r}); column "
                    "names must be unique, ignoring case, because Spark and DuckDB read them "
                    "case-insensitively",
                )
                ok = False
                continue
            folded[cname.lower()] = cname
            if from_sql:
                parsed = ctype
            else:
                try:
                    parsed = parse_type(str(ctype))
                except ValueError as e:
                    parsed = str(e)
            if isinstance(parsed, str):
                self.error([*path, str(cname)], parsed)
                ok = False
                continue
            out.append(ColumnSpec(name=str(cname), type=parsed[0], nullable=parsed[1]))
        return tuple(out), ok

    def sink(self, path: list[str | int], doc: Any) -> SinkSpec | None:
        sinks = self.plugins.sinks
        spec = self.model(path, SinkSpec, doc if doc is not None else {})
        if spec is None:
            return None
        if spec.name not in sinks:
            self.error(
                [*path, "name"],
                f"unknown sink {spec.name!r}; available: {', '.join(sinks.names())}",
            )
            return None
        if self.model([*path, "config"], sinks.get(spec.name).Config, spec.config) is None:
            return None
        return spec

    # --- connectors ---------------------------------------------------------------

    def connectors(
        self,
        tpath: list[str | int],
        table: str,
        columns: tuple[ColumnSpec, ...],
        doc: Any,
        *,
        columns_ok: bool,
        keys: Mapping[str, Any],
    ) -> tuple[ConnectorSpec, ...] | None:
        path = [*tpath, "connectors"]
        # The table as its connectors' checks see it (a format may need the key).
        shape = TableSpec(name=table, columns=columns, **keys)
        if not isinstance(doc, list):
            self.error(path, f"expected a list of connectors, got {describe(doc)}")
            return None
        out: list[ConnectorSpec] = []
        ok = True
        names: dict[str, int] = {}
        for i, cdoc in enumerate(doc):
            cpath = [*path, i]
            if not isinstance(cdoc, Mapping):
                self.error(cpath, f"expected a connector object, got {describe(cdoc)}")
                ok = False
                continue
            cdoc = dict(cdoc)
            if cdoc.get("name") is None:
                cdoc["name"] = f"unnamed-{i}"
            cname = cdoc["name"]
            if isinstance(cname, str):
                if not is_valid_name(cname):
                    self.error([*cpath, "name"], f"connector name {cname!r} must be {NAME_RULE}")
                    ok = False
                elif cname in names:
                    self.error(
                        [*cpath, "name"],
                        f"two connectors of table {table!r} are named {cname!r} (also connectors[{names[cname]}]); names must be unique within a table",
                    )
                    ok = False
                names.setdefault(cname, i)
            spec = self.model(cpath, ConnectorSpec, cdoc)
            if spec is None:
                ok = False
                # Its own fields are wrong; still check its transport and format, so
                # that every problem is reported at once.
                partial = without_bad_fields(cdoc, f"unnamed-{i}")
                if partial is not None:
                    self.labels(cpath, partial)
                    self.parsed.append((table, i, partial))
                    _resolve_connector(
                        partial,
                        shape,
                        self.plugins,
                        self.base_dir,
                        cpath,
                        self.errors,
                        columns_ok=columns_ok,
                    )
                continue
            ok = self.labels(cpath, spec) and ok
            ok = self.partitioned(cpath, spec) and ok
            ok = self.freshness(cpath, spec) and ok
            self.parsed.append((table, i, spec))
            spec = _resolve_connector(
                spec,
                shape,
                self.plugins,
                self.base_dir,
                cpath,
                self.errors,
                columns_ok=columns_ok,
            )
            if spec is None:
                ok = False
                continue
            out.append(spec)
        return tuple(out) if ok else None

    def labels(self, cpath: list[str | int], spec: ConnectorSpec) -> bool:
        """Whether every label of the connector is valid; reports those that are not."""
        ok = True
        for j, label in enumerate(spec.labels):
            if not is_valid_label(label):
                self.error([*cpath, "labels", j], f"label {label!r} must be {LABEL_RULE}")
                ok = False
        return ok

    def partitioned(self, cpath: list[str | int], spec: ConnectorSpec) -> bool:
        """Whether a partitioned trigger has what Airflow partitions need: a schedule
        (one partition per tick) and no event trigger (an event run has no partition)."""
        trigger = spec.trigger
        if trigger is None or not trigger.partitioned:
            return True
        path = [*cpath, "trigger", "partitioned"]
        if not trigger.schedule:
            self.error(
                path,
                "partitioned needs a schedule (one Airflow partition per tick); add "
                "schedule: '@daily' (or another cron) to the trigger, or drop partitioned",
            )
            return False
        if trigger.on == "new_data":
            self.error(
                path,
                "partitioned runs come from the schedule only; drop on: new_data (a run "
                "started by new data has no partition) or drop partitioned",
            )
            return False
        return True

    def freshness(self, cpath: list[str | int], spec: ConnectorSpec) -> bool:
        """Whether the connector's ``freshness`` can be checked; reports why not."""
        if spec.freshness is None:
            return True
        if spec.freshness.total_seconds() <= 0:
            self.error(
                [*cpath, "freshness"],
                f"freshness must be a positive duration such as '2h' or '30m', got {spec.freshness}",
            )
            return False
        if spec.trigger is None or not spec.trigger.schedule:
            self.error(
                [*cpath, "freshness"],
                "freshness is checked each time a run of the connector starts, and without a "
                "schedule no run starts while no data arrives; add trigger.schedule (no longer "
                "than the freshness, e.g. '@hourly' for freshness: 2h; with on: new_data it "
                "adds to the event trigger)",
            )
            return False
        return True

    def model(self, path: list[str | int], cls: type[M], doc: Any) -> M | None:
        return validated(path, cls, doc, self.errors)


def _not_null(columns: tuple[ColumnSpec, ...], key: Sequence[str]) -> tuple[ColumnSpec, ...]:
    """``columns`` with the key columns NOT NULL."""
    names = set(key)
    return tuple(
        c.model_copy(update={"nullable": False}) if c.name in names and c.nullable else c
        for c in columns
    )


def _hinted_kind(hints: Mapping[str, str], column: str) -> str | None:
    """The type kind a schema hint pins for ``column``; None without a (valid) hint (a
    bad hint is reported with the hints)."""
    from airflow_connectors.spec.types import parse_type

    if column not in hints:
        return None
    try:
        return parse_type(hints[column])[0].kind
    except ValueError:
        return None


def _applies_changes(plugins: Plugins, sink: str) -> bool:
    """Whether the sink ``sink`` can apply changes (updates and deletes) to a keyed
    table: its class's ``applies_changes`` (a sink that applies changes says True; one
    without the attribute only appends)."""
    return bool(getattr(plugins.sinks.get(sink), "applies_changes", False))


def _resolve_connector(
    spec: ConnectorSpec,
    table: TableSpec,
    plugins: Plugins,
    base_dir: Path | None,
    cpath: Sequence[str | int],
    errors: list[SpecError],
    *,
    columns_ok: bool = True,
) -> ConnectorSpec | None:
    """:func:`resolve_connector`, appending problems to ``errors`` at paths below
    ``cpath``; ``columns_ok``: the table's columns are all valid, so the transport's
    checks against them mean something."""

    def problem(path: list[str | int], message: str) -> None:
        errors.append(SpecError(path_str(path), message))

    cpath = list(cpath)
    ok = True
    tname = spec.transport.name
    if tname not in plugins.transports:
        hint = NOT_YET.get(tname) or did_you_mean(tname, plugins.transports.names())
        problem(
            [*cpath, "transport", "name"],
            f"transport {tname!r} is not available yet{hint}; available transports: {', '.join(plugins.transports.names())}",
        )
        return None
    tcls = plugins.transports.get(tname)
    raw_config = dict(spec.transport.config)
    raw_config = tcls.resolve_config(raw_config, base_dir)
    tconfig = validated([*cpath, "transport", "config"], tcls.Config, raw_config, errors)
    if tconfig is None:
        ok = False
    elif columns_ok:  # checks against the table's columns need all of them
        try:
            tcls(tconfig, table)
        except ValueError as e:
            problem([*cpath, "transport", "config"], str(e))
            ok = False
        spec = spec.model_copy(
            update={
                "transport": spec.transport.model_copy(
                    update={"config": tconfig.model_dump(mode="json", exclude_unset=False)}
                )
            }
        )
    if spec.format is None:
        if tcls.needs_format:
            problem(
                [*cpath, "format"],
                f'transport {tname!r} needs a format; add "format": {{"name": ...}} with one of: {", ".join(plugins.formats.names())}',
            )
            ok = False
    elif not tcls.needs_format:
        problem(
            [*cpath, "format"],
            f"transport {tname!r} produces records itself and takes no format; remove 'format'",
        )
        ok = False
    elif spec.format.name not in plugins.formats:
        hint = did_you_mean(spec.format.name, plugins.formats.names())
        problem(
            [*cpath, "format", "name"],
            f"format {spec.format.name!r} is not available{hint}; available formats: {', '.join(plugins.formats.names())}",
        )
        ok = False
    else:
        resolved = _resolve_format(spec, table, plugins, cpath, errors, columns_ok=columns_ok)
        ok = ok and resolved is not None
        spec = resolved or spec
    return spec if ok else None


def _resolve_format(
    spec: ConnectorSpec,
    table: TableSpec,
    plugins: Plugins,
    cpath: list[str | int],
    errors: list[SpecError],
    *,
    columns_ok: bool,
) -> ConnectorSpec | None:
    """The connector with its format config validated (against the table too, when its
    columns are valid: the raw format needs a VARCHAR column), or None."""
    assert spec.format is not None
    fcls = plugins.formats.get(spec.format.name)
    path = [*cpath, "format", "config"]
    fconfig = validated(path, fcls.Config, spec.format.config, errors)
    if fconfig is None:
        return None
    if columns_ok:
        try:
            fcls.check_table(fconfig, table)
        except ValueError as e:
            errors.append(SpecError(path_str(path), str(e)))
            return None
    return spec.model_copy(
        update={
            "format": spec.format.model_copy(update={"config": fconfig.model_dump(mode="json")})
        }
    )


def without_bad_fields(doc: dict[str, Any], default_name: str) -> ConnectorSpec | None:
    """The connector with its invalid fields (already reported) left at their defaults,
    or None when its transport or format itself is invalid."""
    try:
        return ConnectorSpec.model_validate(doc)
    except ValidationError as exc:
        bad = {err["loc"][0] for err in exc.errors() if err["loc"]}
    if bad & {"transport", "format"}:
        return None
    kept = {k: v for k, v in doc.items() if k not in bad}
    if "name" in bad:
        kept["name"] = default_name
    try:
        return ConnectorSpec.model_validate(kept)
    except ValidationError:
        return None
