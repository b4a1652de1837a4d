"""Load and validate pipeline specs (YAML, JSON or Feldera SQL) into :class:`PipelineSpec`.

Validation collects every problem at once. Each problem carries the JSON path of the
field and a message a user can act on.
"""

from __future__ import annotations

import difflib
import json
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from airflow_connectors.spec.models import (
    LABEL_RULE,
    NAME_RULE,
    ColumnSpec,
    ConnectorSpec,
    PipelineSpec,
    SinkSpec,
    TableSpec,
    is_valid_column_name,
    is_valid_label,
    is_valid_name,
)

PIPELINE_KEYS = ("pipeline", "tables", "sql")
TABLE_KEYS = ("columns", "sink", "connectors", "sql")
#: The Parquet sink keeps table ``t``'s dead letters in the folder ``t__errors``.
ERRORS_SUFFIX = "__errors"


@dataclass(frozen=True)
class SpecError:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class SpecValidationError(ValueError):
    """Every problem found in a spec; ``str()`` gives one per line."""

    def __init__(self, errors: list[SpecError], source: str | None = None) -> None:
        self.errors = errors
        self.source = source
        head = f"{source}: " if source else ""
        super().__init__(
            f"{head}{len(errors)} problem(s) in pipeline spec:\n"
            + "\n".join(str(e) for e in errors)
        )


def load_pipeline(path: str | Path, *, pipeline: str | None = None) -> PipelineSpec:
    """Read a ``.yaml``/``.yml``/``.json`` spec or a ``.sql`` file of CREATE TABLE
    statements (pipeline name = file stem unless ``pipeline`` is given)."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise SpecValidationError(
            [SpecError("", f"cannot read spec file: {e.strerror}")], str(p)
        ) from e
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecValidationError(
            [
                SpecError(
                    "",
                    f"the spec file must be UTF-8 text, but byte 0x{data[e.start]:02x} at byte "
                    f"offset {e.start} is not valid UTF-8; save the file as UTF-8",
                )
            ],
            str(p),
        ) from None
    doc: Any
    duplicates: list[SpecError] = []
    try:
        if p.suffix.lower() == ".sql":
            doc = {"pipeline": pipeline or p.stem, "sql": text}
            pipeline = None
        elif p.suffix.lower() == ".json":
            try:
                from airflow_connectors.spec.sql import unique_keys

                keys: list[str] = []
                doc = json.loads(text, object_pairs_hook=unique_keys(keys))
            except json.JSONDecodeError as e:
                raise SpecValidationError(
                    [SpecError("", f"invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}")],
                    str(p),
                ) from e
            duplicates = [
                SpecError(
                    "",
                    f"duplicate key {key!r} in a JSON object; JSON keeps only the last one and "
                    "drops the first: merge them or rename one",
                )
                for key in keys
            ]
        else:
            import yaml

            try:
                doc, duplicates = _load_yaml(text)
            except yaml.YAMLError as e:
                raise SpecValidationError([SpecError("", f"invalid YAML: {e}")], str(p)) from e
    except RecursionError:
        raise SpecValidationError(
            [SpecError("", "the spec nests lists or mappings too deeply to be read")], str(p)
        ) from None
    return _parse(doc, pipeline, p.resolve().parent, str(p), duplicates)


def _load_yaml(text: str) -> tuple[Any, list[SpecError]]:
    """The YAML document and its duplicate keys (PyYAML would silently keep the last)."""
    loader = _yaml_loader()(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, []
        duplicates = _duplicate_keys(loader, node)
        return loader.construct_document(node), duplicates
    finally:
        loader.dispose()


def _duplicate_keys(loader: Any, root: Any) -> list[SpecError]:
    """A key given twice in one mapping, with its JSON path and both lines. Iterative:
    a deeply nested document must not exhaust the call stack."""
    import yaml

    found: list[tuple[int, SpecError]] = []  # (line, error)
    seen_nodes: set[int] = set()
    todo: list[tuple[Any, list[str | int]]] = [(root, [])]
    while todo:
        node, path = todo.pop()
        if id(node) in seen_nodes:  # an alias of a node already checked
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            todo.extend((child, [*path, i]) for i, child in enumerate(node.value))
        elif isinstance(node, yaml.MappingNode):
            first: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *base` may be overridden by the keys beside it
                key: Any = key_node.value
                if isinstance(key_node, yaml.ScalarNode):
                    key = loader.construct_object(key_node)
                todo.append((value_node, [*path, str(key)]))
                try:
                    earlier = first.setdefault(key, key_node)
                except TypeError:  # an unhashable (complex) key: PyYAML rejects it
                    continue
                if earlier is not key_node:
                    line = key_node.start_mark.line + 1
                    found.append(
                        (
                            line,
                            SpecError(
                                path_str([*path, str(key)]),
                                f"duplicate key {key!r} at line {line} (first at line "
                                f"{earlier.start_mark.line + 1}); YAML keeps only the last one "
                                "and drops the first: merge them or rename one",
                            ),
                        )
                    )
    return [error for _, error in sorted(found, key=lambda f: f[0])]


def _yaml_loader() -> Any:
    """A safe loader with YAML 1.2 booleans: only true/false are booleans, so keys and
    values such as ``on``, ``off``, ``yes`` and ``no`` stay strings (``trigger: {on:
    new_data}``)."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:bool",
        re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
        list("tTfF"),
    )
    return Loader


def parse_pipeline(
    doc: Any, *, name: str | None = None, base_dir: Path | None = None, source: str | None = None
) -> PipelineSpec:
    """Validate a spec document (the parsed YAML/JSON) and return the pipeline."""
    return _parse(doc, name, base_dir, source, [])


def _parse(
    doc: Any,
    name: str | None,
    base_dir: Path | None,
    source: str | None,
    earlier: list[SpecError],
) -> PipelineSpec:
    """``earlier``: problems found while reading the file (duplicate keys), reported
    together with the document's."""
    v = _Validator(base_dir)
    v.errors.extend(earlier)
    spec = v.pipeline(doc, name, source)
    if v.errors or spec is None:
        raise SpecValidationError(v.errors, source)
    return spec


def validate_pipeline(
    doc: Any, *, name: str | None = None, base_dir: Path | None = None
) -> list[SpecError]:
    """Every problem in ``doc``; empty when it is valid."""
    v = _Validator(base_dir)
    v.pipeline(doc, name, None)
    return v.errors


def path_str(parts: typing.Iterable[str | int]) -> str:
    """``tables.t.connectors[0].name``; a key that is empty or holds spaces or control
    characters is quoted (``tables["t\\n"]``) so that an error stays one line."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not _PLAIN_KEY.fullmatch(part):
            out += f"[{json.dumps(part)}]"
        else:
            out += f".{part}" if out else str(part)
    return out


_PLAIN_KEY = re.compile(r"[^\s\x00-\x1f\x7f\[\]\"]+")


class _Validator:
    def __init__(self, base_dir: Path | None) -> None:
        self.base_dir = base_dir
        self.errors: list[SpecError] = []
        # Connectors that parsed, even in tables with errors: start_after is checked
        # across all of them so every problem is reported at once.
        self.parsed: list[tuple[str, int, ConnectorSpec]] = []

    def error(self, path: list[str | int], message: str) -> None:
        self.errors.append(SpecError(path_str(path), message))

    def unknown_keys(
        self, path: list[str | int], doc: Mapping[str, Any], allowed: typing.Sequence[str]
    ) -> None:
        for key in doc:
            if key not in allowed:
                self.error([*path, str(key)], _unknown_field(str(key), allowed))

    # --- pipeline and tables ------------------------------------------------------

    def pipeline(self, doc: Any, name: str | None, source: str | None) -> PipelineSpec | None:
        if not isinstance(doc, Mapping):
            self.error(
                [], f"expected a mapping with keys {', '.join(PIPELINE_KEYS)}, got {_kind(doc)}"
            )
            return None
        self.unknown_keys([], doc, PIPELINE_KEYS)
        name = name or doc.get("pipeline")
        if not isinstance(name, str) or not is_valid_name(name):
            self.error(["pipeline"], f"expected a pipeline name of {NAME_RULE}, got {name!r}")
            name = "invalid"
        raw_tables: list[tuple[list[str | int], str, Any]] = []
        tables_doc = doc.get("tables", {})
        if not isinstance(tables_doc, Mapping):
            self.error(
                ["tables"], f"expected a mapping of table name -> table, got {_kind(tables_doc)}"
            )
            tables_doc = {}
        for tname, tdoc in tables_doc.items():
            raw_tables.append((["tables", str(tname)], str(tname), tdoc))
        if "sql" in doc:
            if not isinstance(doc["sql"], str):
                self.error(
                    ["sql"], f"expected SQL text (CREATE TABLE statements), got {_kind(doc['sql'])}"
                )
            else:
                for sql_table in self.sql_tables(doc["sql"], ["sql"]):
                    raw_tables.append((["tables", sql_table["name"]], sql_table["name"], sql_table))
        if not raw_tables:
            self.error(["tables"], "the pipeline has no tables; add 'tables' or 'sql'")
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
        self.orchestration()
        if self.errors:
            return None
        return PipelineSpec(name=name, tables=tuple(tables), source=source)

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
                f"expected a table (columns, connectors, sink) or {{sql: CREATE TABLE ...}}, got {_kind(doc)}",
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
        columns, columns_ok = self.columns(
            [*path, "columns"], doc.get("columns"), from_sql=bool(doc.get("_sql"))
        )
        sink = self.sink([*path, "sink"], doc.get("sink"))
        # Connectors are checked even when columns or sink are wrong: every problem at once.
        connectors = self.connectors(
            path, name, columns, doc.get("connectors", []), columns_ok=columns_ok
        )
        if connectors is None or not columns_ok or sink is None:
            return None
        return TableSpec(name=name, columns=columns, sink=sink, connectors=connectors)

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
        from airflow_connectors.sinks import SINKS

        spec = self.model(path, SinkSpec, doc if doc is not None else {})
        if spec is None:
            return None
        if spec.name not in SINKS:
            self.error(
                [*path, "name"],
                f"unknown sink {spec.name!r}; available: {', '.join(SINKS.names())}",
            )
            return None
        if self.model([*path, "config"], SINKS.get(spec.name).Config, spec.config) is None:
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
            self.error(path, f"expected a list of connectors, got {_kind(doc)}")
            return None
        out: list[ConnectorSpec] = []
        ok = True
        names: dict[str, int] = {}
        for i, cdoc in enumerate(doc):
            cpath = [*path, i]
            if not isinstance(cdoc, Mapping):
                self.error(cpath, f"expected a connector object, got {_kind(cdoc)}")
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
                    self.plugins(cpath, partial, table, columns, columns_ok=columns_ok)
                continue
            ok = self.labels(cpath, spec) and ok
            self.parsed.append((table, i, spec))
            spec = self.plugins(cpath, spec, table, columns, columns_ok=columns_ok)
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

    def plugins(
        self,
        cpath: list[str | int],
        spec: ConnectorSpec,
        table: str,
        columns: tuple[ColumnSpec, ...],
        *,
        columns_ok: bool,
    ) -> ConnectorSpec | None:
        from airflow_connectors.formats import FORMATS
        from airflow_connectors.transports import TRANSPORTS

        ok = True
        tname = spec.transport.name
        table_spec = TableSpec(name=table, columns=columns)
        if tname not in TRANSPORTS:
            hint = _close(tname, TRANSPORTS.names())
            self.error(
                [*cpath, "transport", "name"],
                f"transport {tname!r} is not available yet{hint}; available transports: {', '.join(TRANSPORTS.names())}",
            )
            return None
        tcls = TRANSPORTS.get(tname)
        raw_config = dict(spec.transport.config)
        raw_config = tcls.resolve_config(raw_config, self.base_dir)
        tconfig = self.model([*cpath, "transport", "config"], tcls.Config, raw_config)
        if tconfig is None:
            ok = False
        elif columns_ok:  # checks against the table's columns need all of them
            try:
                tcls(tconfig, table_spec)
            except ValueError as e:
                self.error([*cpath, "transport", "config"], str(e))
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
                self.error(
                    [*cpath, "format"],
                    f'transport {tname!r} needs a format; add "format": {{"name": ...}} with one of: {", ".join(FORMATS.names())}',
                )
                ok = False
        elif not tcls.needs_format:
            self.error(
                [*cpath, "format"],
                f"transport {tname!r} produces records itself and takes no format; remove 'format'",
            )
            ok = False
        elif spec.format.name not in FORMATS:
            hint = _close(spec.format.name, FORMATS.names())
            self.error(
                [*cpath, "format", "name"],
                f"format {spec.format.name!r} is not available{hint}; available formats: {', '.join(FORMATS.names())}",
            )
            ok = False
        else:
            fcls = FORMATS.get(spec.format.name)
            fconfig = self.model([*cpath, "format", "config"], fcls.Config, spec.format.config)
            if fconfig is None:
                ok = False
            else:
                spec = spec.model_copy(
                    update={
                        "format": spec.format.model_copy(
                            update={"config": fconfig.model_dump(mode="json")}
                        )
                    }
                )
        return spec if ok else None

    def orchestration(self) -> None:
        """start_after: not empty, names only carried labels, no cycles."""
        carriers: dict[str, list[str]] = {}
        where: dict[str, list[str | int]] = {}
        for table, i, c in self.parsed:
            where[f"{table}.{c.name}"] = ["tables", table, "connectors", i]
            for label in c.labels:
                carriers.setdefault(label, []).append(f"{table}.{c.name}")
        waits: dict[str, tuple[str, ...]] = {}
        for table, i, c in self.parsed:
            ep = f"{table}.{c.name}"
            here: list[str | int] = ["tables", table, "connectors", i, "start_after"]
            if c.start_after is None:
                continue
            if not c.start_after:
                self.error(
                    here,
                    f"empty 'start_after' for connector {ep}; name at least one label, or remove the field",
                )
                continue
            for label in c.start_after:
                if label not in carriers:
                    known = (
                        ", ".join(sorted(carriers))
                        or "(none: add 'labels' to the connectors to wait for)"
                    )
                    self.error(
                        here,
                        f"connector {ep} waits for label {label!r}, which no connector carries; labels in this pipeline: {known}",
                    )
            waits[ep] = c.start_after
        # A waits for B when A.start_after names a label B carries.
        component = _components(waits, waits, carriers)
        members: dict[int, set[str]] = {}
        for ep, comp in component.items():
            members.setdefault(comp, set()).add(ep)
        reported: set[frozenset[str]] = set()
        # A component where each connector waits for exactly one other of it is one simple
        # cycle (a ring): reported once, not searched again from each of its members.
        simple: dict[int, bool] = {}
        for start in waits:
            comp = component[start]
            group = members[comp]
            if not any(nxt in group for _, nxt in _edges(start, waits, carriers)):
                continue  # no cycle runs through it
            if simple.get(comp):
                continue
            if comp not in simple:
                simple[comp] = all(
                    sum(nxt in group for _, nxt in _edges(ep, waits, carriers)) == 1 for ep in group
                )
            cycle = _find_cycle(start, waits, carriers, group)
            if cycle and frozenset(ep for ep, _ in cycle) not in reported:
                reported.add(frozenset(ep for ep, _ in cycle))
                text = "".join(
                    f"{'' if i == 0 else ', which '}{ep if i == 0 else ''}{' ' if i == 0 else ''}waits for label {label!r} carried by {nxt}"
                    for i, ((ep, label), (nxt, _)) in enumerate(
                        zip(cycle, cycle[1:] + cycle[:1], strict=True)
                    )
                )
                self.error(
                    [*where[cycle[0][0]], "start_after"],
                    f"cyclic 'start_after' dependency: {text}; remove one of these labels or start_after entries",
                )

    # --- pydantic bridge ----------------------------------------------------------

    def model(self, path: list[str | int], cls: type[BaseModel], doc: Any) -> Any:
        try:
            return cls.model_validate(doc)
        except ValidationError as exc:
            for err in exc.errors(include_url=False):
                loc = list(err["loc"])
                if err["type"] == "extra_forbidden":
                    allowed = _fields_at(cls, loc[:-1])
                    self.error([*path, *loc], _unknown_field(str(loc[-1]), allowed))
                elif err["type"] == "missing":
                    self.error([*path, *loc], "required field is missing")
                else:
                    msg = err["msg"].removeprefix("Value error, ")
                    got = err.get("input")
                    shown = (
                        ""
                        if isinstance(got, Mapping | list) or repr(got) in msg
                        else f" (got {got!r})"
                    )
                    self.error([*path, *loc], f"{msg[0].lower()}{msg[1:]}{shown}")
            return None


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


def _edges(
    ep: str, waits: Mapping[str, tuple[str, ...]], carriers: Mapping[str, list[str]]
) -> typing.Iterator[tuple[str, str]]:
    """(label, endpoint carrying it) for each label ``ep`` waits for."""
    for label in waits.get(ep, ()):
        for nxt in carriers.get(label, []):
            yield label, nxt


def _find_cycle(
    start: str,
    waits: Mapping[str, tuple[str, ...]],
    carriers: Mapping[str, list[str]],
    within: typing.Container[str] | None = None,
) -> list[tuple[str, str]] | None:
    """A cycle through ``start`` as [(endpoint, label it waits for), ...], or None.

    Depth-first with an explicit stack (a start_after chain of thousands of connectors
    must not exhaust Python's call stack); ``within`` limits the walk to ``start``'s
    strongly connected component, the only place a cycle through it can be."""
    path: list[tuple[str, str]] = []
    seen: set[str] = set()
    frames = [(start, _edges(start, waits, carriers))]
    while frames:
        ep, edges = frames[-1]
        for label, nxt in edges:
            if nxt == start:
                return [*path, (ep, label)]
            if nxt not in seen and (within is None or nxt in within):
                seen.add(nxt)
                path.append((ep, label))
                frames.append((nxt, _edges(nxt, waits, carriers)))
                break
        else:
            frames.pop()
            if path:
                path.pop()
    return None


def _components(
    nodes: typing.Iterable[str],
    waits: Mapping[str, tuple[str, ...]],
    carriers: Mapping[str, list[str]],
) -> dict[str, int]:
    """Tarjan's strongly connected components, iteratively: endpoint -> component id."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    component: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    counter = 0
    for root in nodes:
        if root in index:
            continue
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        frames = [(root, _edges(root, waits, carriers))]
        while frames:
            ep, edges = frames[-1]
            for _, nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    frames.append((nxt, _edges(nxt, waits, carriers)))
                    break
                if nxt in on_stack:
                    low[ep] = min(low[ep], index[nxt])
            else:
                frames.pop()
                if frames:
                    parent = frames[-1][0]
                    low[parent] = min(low[parent], low[ep])
                if low[ep] == index[ep]:
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component[member] = index[ep]
                        if member == ep:
                            break
    return component


def _unknown_field(key: str, allowed: typing.Sequence[str]) -> str:
    hint = _close(key, allowed)
    return f"unknown field {key!r}{hint}; allowed fields: {', '.join(allowed)}"


def _close(word: str, options: typing.Sequence[str]) -> str:
    match = difflib.get_close_matches(word, list(options), n=1, cutoff=0.75)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _fields_at(cls: type[BaseModel], loc: list[Any]) -> list[str]:
    """Field names of the model reached by following ``loc`` from ``cls``."""
    current: Any = cls
    for part in loc:
        if isinstance(part, int):
            continue
        model = _model_in(current)
        if model is None or part not in model.model_fields:
            return []
        current = model.model_fields[part].annotation
    model = _model_in(current)
    return [f for f in model.model_fields if not f.startswith("_")] if model else []


def _model_in(tp: Any) -> type[BaseModel] | None:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp
    for arg in typing.get_args(tp):
        found = _model_in(arg)
        if found is not None:
            return found
    if isinstance(tp, types.UnionType):
        return None
    return None


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    return {
        dict: "a mapping",
        list: "a list",
        str: f"the string {value!r}",
        bool: f"the boolean {value}",
        int: f"the number {value}",
        float: f"the number {value}",
    }.get(type(value), type(value).__name__)
