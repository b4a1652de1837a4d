"""Validate a spec document (the parsed YAML/JSON, or SQL text) into a
:class:`PipelineSpec`.

Validation collects every problem at once. Each problem carries the JSON path of the
field and a message a user can act on (see :mod:`.errors`).

The transports, formats and sinks a spec names are looked up in the :class:`Plugins`
the caller passes: the spec layer sits below the plugins and imports none of them
(:mod:`airflow_connectors.catalog` passes the installed ones).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

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
)
from airflow_connectors.spec.plugins import Plugins

M = TypeVar("M", bound=BaseModel)

PIPELINE_KEYS = ("pipeline", "tables", "sql")
TABLE_KEYS = ("columns", "sink", "connectors", "sql", "schema_hints", "schema_evolution")
SCHEMA_EVOLUTION_MODES = ("add_new_columns", "rescue", "fail_on_new_columns", "none")
#: The Parquet sink keeps table ``t``'s dead letters in the folder ``t__errors``.
ERRORS_SUFFIX = "__errors"


#: Feldera transports this release cannot offer yet, with why: no such broker runs where
#: the product is tested, so they would ship untested. A transport can be added as a
#: plugin (README: "Writing a transport").
NOT_YET: dict[str, str] = {
    name: f" ({why}; a transport for it can be added as a plugin: see 'Writing a transport' in the README)"
    for name, why in {
        "pub_sub_input": "Google Pub/Sub is not supported in this release",
        "pubsub_input": "Google Pub/Sub (Feldera's pub_sub_input) is not supported in this release",
        "postgres_cdc_input": "PostgreSQL change data capture (logical replication) is not supported "
        "in this release; postgres_input reads snapshots and incremental cursors",
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
) -> ConnectorSpec:
    """The connector with its transport and format configs resolved and validated: the
    transport's :meth:`resolve_config` (relative paths taken from ``base_dir``), each
    config checked against its plugin's ``Config`` and the transport against the table's
    columns, and the configs stored as the plugins normalise them.

    The one check of a connector's plugin configs: loading a spec runs it on every
    connector, and the Airflow tasks run it again on the configs as templated for their
    run. Raises :class:`SpecValidationError` whose paths start at the connector
    (``transport.config.path``)."""
    errors: list[SpecError] = []
    resolved = _resolve_connector(connector, table, plugins, base_dir, [], errors)
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
            out.append(
                {
                    "name": t.name,
                    "columns": t.columns,
                    "connectors": t.connectors if t.connectors is not None else [],
                    "_sql": True,
                }
            )
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
            doc = {**parsed[0], "sink": doc.get("sink")}
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
        # Connectors are checked even when columns or sink are wrong: every problem at once.
        connectors = self.connectors(
            path, name, columns, doc.get("connectors", []), columns_ok=columns_ok
        )
        if connectors is None or not columns_ok or sink is None or hints is None:
            return None
        if not evolution_ok:
            return None
        return TableSpec(
            name=name,
            columns=columns,
            sink=sink,
            connectors=connectors,
            schema_hints=hints,
            schema_evolution=evolution,
        )

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
    ) -> tuple[ConnectorSpec, ...] | None:
        path = [*tpath, "connectors"]
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
                partial = _without_bad_fields(cdoc, f"unnamed-{i}")
                if partial is not None:
                    self.labels(cpath, partial)
                    self.parsed.append((table, i, partial))
                    _resolve_connector(
                        partial,
                        TableSpec(name=table, columns=columns),
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
                TableSpec(name=table, columns=columns),
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


def _without_bad_fields(doc: dict[str, Any], default_name: str) -> ConnectorSpec | None:
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
