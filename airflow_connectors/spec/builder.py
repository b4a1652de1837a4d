"""Pipeline specs built in Python instead of YAML::

    from airflow_connectors import Pipeline

    shop = (
        Pipeline("shop")
        .table("orders", columns={"id": "BIGINT NOT NULL", "amount": "DOUBLE"})
        .connector("live", transport={"name": "file_input", "config": {"path": "in/"}},
                   format={"name": "json"})
        .connector("backfill", transport={...}, format={...}, paused=True)
        .table("refunds", columns={...})
        .connector("files", transport={...}, format={...})
    )

A keyed table takes changes (upserts, updates, deletes) instead of appending rows::

    Pipeline("shop").table(
        "customers",
        columns={"id": "BIGINT", "name": "VARCHAR", "lsn": "BIGINT"},
        primary_key=["id"], sequence_by="lsn", sink={"name": "delta"},
    )

``table()`` returns the table's builder; its ``connector()`` returns the same table
builder, so connectors chain, and its ``table()`` starts the pipeline's next table.
Every keyword is a field of the YAML spec, under the same name and in the same shape
(``columns`` may be omitted, ``sink={"name": "delta"}``, ``trigger={"schedule":
"@daily"}``...).

The builder writes nothing but the plain document a YAML file would hold
(:meth:`Pipeline.document`) and :meth:`Pipeline.build` runs the YAML validator on it: a
mistake gets the same message with the same path (``tables.orders.connectors[0]...``)
as in a spec file, and a built pipeline equals the one loaded from the same YAML.
Hand the builder (either object of a chain) to ``ConnectorPipeline`` or
``ConnectorTaskGroup``, which validate it against the installed plugins.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow_connectors.spec.errors import SpecError, path_str
from airflow_connectors.spec.models import PipelineSpec
from airflow_connectors.spec.plugins import Plugins
from airflow_connectors.spec.validate import parse_document

__all__ = ["Pipeline", "TableBuilder"]


def _plain(value: Any) -> Any:
    """``value`` as YAML would give it: mappings as dicts, sequences as lists, paths as
    text; copied, so later changes to the caller's objects do not change the spec."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, datetime.timedelta):  # as YAML writes a duration
        seconds = value.total_seconds()
        return f"{int(seconds) if seconds.is_integer() else seconds}s"
    return value


def _fields(**given: Any) -> dict[str, Any]:
    """The given fields (None: not given, as a key absent from the YAML)."""
    return {k: _plain(v) for k, v in given.items() if v is not None}


class Pipeline:
    """A pipeline spec under construction: ``Pipeline(name).table(...).connector(...)``.

    :param name: the pipeline's name (as the YAML's ``pipeline``).
    :param base_dir: where relative paths in transport configs are taken from (a spec
        file's folder for YAML). Default: the folder of the DAG file that hands the
        pipeline to ``ConnectorPipeline``/``ConnectorTaskGroup``; for :meth:`build`,
        the current directory.
    """

    def __init__(self, name: str, *, base_dir: str | Path | None = None) -> None:
        self.name = name
        self.base_dir = Path(base_dir) if base_dir is not None else None
        self._tables: dict[str, dict[str, Any]] = {}
        # Problems only the builder can see (a table added twice), reported with the
        # validator's, as a spec file's duplicate keys are.
        self._problems: list[SpecError] = []

    @property
    def pipeline(self) -> Pipeline:
        """This pipeline (as :attr:`TableBuilder.pipeline`, so any link of a chain can
        be handed on)."""
        return self

    def table(
        self,
        name: str,
        *,
        columns: Mapping[str, str] | None = None,
        sink: Mapping[str, Any] | None = None,
        sql: str | None = None,
        primary_key: str | Sequence[str] | None = None,
        sequence_by: str | None = None,
        scd_type: int | None = None,
        tombstone_retention: str | datetime.timedelta | None = None,
        **fields: Any,
    ) -> TableBuilder:
        """Add the table ``name`` and return its builder. ``columns`` (name -> SQL type,
        omitted: inferred), ``sink``, ``sql`` (one CREATE TABLE), the key fields
        (``primary_key``: the columns that identify a row, so the table takes changes;
        ``sequence_by``, ``scd_type``, ``tombstone_retention``: a duration such as
        ``"7d"`` or a ``timedelta``) and any further table field of the spec
        (``schema_hints``, ``schema_evolution``...)."""
        doc = _fields(
            columns=columns,
            sink=sink,
            sql=sql,
            primary_key=primary_key,
            sequence_by=sequence_by,
            scd_type=scd_type,
            tombstone_retention=tombstone_retention,
            **fields,
        )
        if name in self._tables:
            self._problems.append(
                SpecError(path_str(["tables", str(name)]), f"table {name!r} is defined twice")
            )
            # The first definition is validated; the second is reported, not merged.
            return TableBuilder(self, name, {"connectors": []})
        self._tables[name] = doc
        return TableBuilder(self, name, doc)

    def document(self) -> dict[str, Any]:
        """The spec as the plain document a YAML file would hold (a copy)."""
        return {"pipeline": self.name, "tables": _plain(self._tables)}

    def build(
        self, plugins: Plugins, *, base_dir: str | Path | None = None, source: str | None = None
    ) -> PipelineSpec:
        """The validated pipeline: :meth:`document` through the spec validator against
        ``plugins`` (``airflow_connectors.catalog.PLUGINS``: the installed ones).
        Raises :class:`~airflow_connectors.spec.SpecValidationError` with every problem,
        as loading the same YAML would."""
        folder = base_dir if base_dir is not None else self.base_dir
        return parse_document(
            self.document(),
            name=None,
            base_dir=Path(folder) if folder is not None else None,
            source=source,
            plugins=plugins,
            earlier=self._problems,
        )

    def __repr__(self) -> str:
        return f"Pipeline({self.name!r}, tables={list(self._tables)!r})"


class TableBuilder:
    """One table of a :class:`Pipeline` under construction: add its connectors with
    :meth:`connector`, go on with the next table with :meth:`table`."""

    def __init__(self, pipeline: Pipeline, name: str, doc: dict[str, Any]) -> None:
        self._pipeline = pipeline
        self.name = name
        self._doc = doc

    @property
    def pipeline(self) -> Pipeline:
        """The pipeline this table belongs to."""
        return self._pipeline

    def connector(
        self,
        name: str | None = None,
        *,
        transport: Mapping[str, Any] | None = None,
        format: Mapping[str, Any] | None = None,
        **fields: Any,
    ) -> TableBuilder:
        """Add a connector to this table and return the table (to chain more).
        ``transport`` and ``format`` as in YAML (``{"name": ..., "config": {...}}``) and
        any further connector field (``trigger``, ``labels``, ``start_after``,
        ``paused``, ``tasks_max``, ``errors``, ``freshness``...)."""
        doc = _fields(name=name, transport=transport, format=format, **fields)
        self._doc.setdefault("connectors", []).append(doc)
        return self

    def table(
        self,
        name: str,
        *,
        columns: Mapping[str, str] | None = None,
        sink: Mapping[str, Any] | None = None,
        sql: str | None = None,
        primary_key: str | Sequence[str] | None = None,
        sequence_by: str | None = None,
        scd_type: int | None = None,
        tombstone_retention: str | datetime.timedelta | None = None,
        **fields: Any,
    ) -> TableBuilder:
        """The pipeline's next table (:meth:`Pipeline.table`)."""
        return self._pipeline.table(
            name,
            columns=columns,
            sink=sink,
            sql=sql,
            primary_key=primary_key,
            sequence_by=sequence_by,
            scd_type=scd_type,
            tombstone_retention=tombstone_retention,
            **fields,
        )

    def document(self) -> dict[str, Any]:
        """The pipeline's document (:meth:`Pipeline.document`)."""
        return self._pipeline.document()

    def build(
        self, plugins: Plugins, *, base_dir: str | Path | None = None, source: str | None = None
    ) -> PipelineSpec:
        """The validated pipeline (:meth:`Pipeline.build`)."""
        return self._pipeline.build(plugins, base_dir=base_dir, source=source)

    def __repr__(self) -> str:
        return f"TableBuilder({self._pipeline.name!r}, {self.name!r})"
