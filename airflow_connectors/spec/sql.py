"""Feldera SQL DDL: ``CREATE TABLE t (...) WITH ('connectors' = '[...]')``, parsed with
sqlglot (a real SQL parser) into the same raw table documents YAML specs produce.

A primary key is written as Feldera (and SQL) write it: on a column (``id BIGINT NOT NULL
PRIMARY KEY``) or for the table (``PRIMARY KEY (tenant, id)``, optionally named with
``CONSTRAINT pk``); it becomes the table's ``primary_key``. Other table constraints
(``FOREIGN KEY``, ``UNIQUE``) are ignored, as Feldera ignores them."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlglot import exp


@dataclass
class SqlTable:
    """One ``CREATE TABLE`` statement as parsed, before it becomes a table document;
    problems found while parsing are kept in ``errors`` rather than raised."""

    name: str
    columns: dict[str, str | tuple[Any, bool]]  # name -> (SqlType, nullable) or error text
    connectors: Any = None  # the parsed JSON value of the 'connectors' property
    #: The ``PRIMARY KEY`` columns (column-level or table-level), None when there is none.
    primary_key: list[str] | None = None
    errors: list[tuple[tuple[str, ...], str]] = field(default_factory=list)  # (path, message)


def parse_create_tables(sql: str) -> tuple[list[SqlTable], list[tuple[int | None, str]]]:
    """Parse every statement; returns tables and statement-level errors
    (statement index or None for the whole text, message)."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ParseError

    try:
        statements = [s for s in sqlglot.parse(sql, read="postgres") if s is not None]
    except ParseError as e:
        detail = e.errors[0] if e.errors else {}
        where = f" at line {detail.get('line')}, column {detail.get('col')}" if detail else ""
        return [], [(None, f"cannot parse SQL{where}: {detail.get('description', str(e))}")]
    tables: list[SqlTable] = []
    errors: list[tuple[int | None, str]] = []
    for i, stmt in enumerate(statements):
        if not (
            isinstance(stmt, exp.Create)
            and stmt.kind == "TABLE"
            and isinstance(stmt.this, exp.Schema)
        ):
            errors.append(
                (
                    i,
                    f"expected CREATE TABLE name (columns...) WITH (...), got: {stmt.sql()[:80]}",
                )
            )
            continue
        tables.append(_create_table(stmt))
    return tables, errors


def _create_table(stmt: exp.Create) -> SqlTable:
    """One ``CREATE TABLE`` statement: its columns and its ``connectors`` property."""
    from sqlglot import exp

    table_id = stmt.this.this
    table = SqlTable(_ident(table_id.this), {})  # the Identifier knows if it was quoted
    keys: list[tuple[str, list[str]]] = []  # (how it was written, columns) per PRIMARY KEY
    for col in stmt.this.expressions:
        if isinstance(col, exp.ColumnDef):
            _add_column(table, col)
            if any(isinstance(c.kind, exp.PrimaryKeyColumnConstraint) for c in col.constraints):
                name = _ident(col.this)
                keys.append((f"column {name} PRIMARY KEY", [name]))
            continue
        key = col if isinstance(col, exp.PrimaryKey) else None
        if isinstance(col, exp.Constraint):  # CONSTRAINT name PRIMARY KEY (a, b)
            key = next((e for e in col.expressions if isinstance(e, exp.PrimaryKey)), None)
        if key is not None:  # other table constraints (FOREIGN KEY, UNIQUE) are ignored
            names = [_ident(e) for e in key.expressions]
            keys.append((f"PRIMARY KEY ({', '.join(names)})", names))
    if len(keys) > 1:
        table.errors.append(
            (
                ("primary_key",),
                f"CREATE TABLE {table.name} declares {len(keys)} primary keys "
                f"({'; '.join(k for k, _ in keys)}); a table has one: list every key column "
                "in one PRIMARY KEY (a, b)",
            )
        )
    elif keys:
        table.primary_key = keys[0][1]
    props = stmt.args.get("properties")
    for prop in props.expressions if props else []:
        _add_property(table, prop)
    return table


def _add_column(table: SqlTable, col: exp.ColumnDef) -> None:
    """``col``'s type (or why it has none) in ``table.columns``; a second column of the
    same name is an error."""
    from airflow_connectors.spec.types import from_column_def

    name = _ident(col.this)
    if name in table.columns:
        # Unquoted names are lower-cased, so `a INT, A INT` is a duplicate too.
        table.errors.append(
            (
                ("columns", name),
                f"column {name!r} is defined twice in CREATE TABLE {table.name}; "
                "column names must be unique: rename or remove one",
            )
        )
        return
    try:
        table.columns[name] = from_column_def(col)
    except ValueError as e:
        table.columns[name] = str(e)


def _add_property(table: SqlTable, prop: exp.Expression) -> None:
    """A ``WITH (...)`` property: ``'connectors' = '<JSON array>'`` is the only one."""
    from sqlglot import exp

    key = prop.this.this if isinstance(prop.this, exp.Literal) else prop.name
    if str(key).lower() != "connectors":
        table.errors.append(
            (
                (str(key),),
                f"unknown table property {key!r}; the supported property is 'connectors'",
            )
        )
        return
    value = prop.args.get("value")
    text = value.this if isinstance(value, exp.Literal) and value.is_string else None
    if text is None:
        table.errors.append(
            (("connectors",), "expected 'connectors' = '<JSON array>' (a string literal)")
        )
        return
    _parse_connectors(table, text)


def _parse_connectors(table: SqlTable, text: str) -> None:
    """The ``connectors`` JSON into ``table.connectors``; syntax errors and keys given
    twice in one object into ``table.errors``."""
    duplicates: list[str] = []
    try:
        table.connectors = json.loads(text, object_pairs_hook=unique_keys(duplicates))
    except json.JSONDecodeError as e:
        table.errors.append(
            (
                ("connectors",),
                f"'connectors' is not legal JSON: {e.msg} at line {e.lineno}, column {e.colno} of the string",
            )
        )
    for key in duplicates:
        table.errors.append(
            (
                ("connectors",),
                f"duplicate key {key!r} in a JSON object of 'connectors'; JSON keeps "
                "only the last one and drops the first: merge them or rename one",
            )
        )


def unique_keys(duplicates: list[str]) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    """An ``object_pairs_hook`` for :func:`json.loads` that records in ``duplicates`` the
    keys given twice in one object (the parser alone silently keeps the last)."""

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                duplicates.append(key)
            out[key] = value
        return out

    return hook


def _ident(node: Any) -> str:
    """Feldera lower-cases unquoted identifiers and keeps quoted ones as written."""
    name = str(node.name if hasattr(node, "name") else node)
    quoted = bool(getattr(node, "args", {}).get("quoted")) if hasattr(node, "args") else False
    return name if quoted else name.lower()
