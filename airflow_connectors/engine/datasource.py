"""Transports as PySpark Python data sources (``pyspark.sql.datasource``).

Every registered transport is a Spark format of the same name. Users outside Airflow::

    from airflow_connectors.engine.datasource import register
    register(spark)
    df = (spark.read.format("file_input").schema("id BIGINT, name STRING")
          .option("path", "/data/*.json").option("format", "json")
          .option("format.update_format", "raw").load())

The engine runs planned batches through the same transport and format code
(:func:`airflow_connectors.engine.reader.ingest_partition`): work items packed into Spark
tasks by size, each task decoding with pyarrow and writing its sink parts from the
executor, returning a receipt per item (measured ~2x faster than handing Arrow rows to the
JVM writer for JSON). It submits them
as a plain RDD job rather than through these sources: reading a Python data source starts
fresh Python planner processes for every batch, where RDD tasks reuse Spark's pooled
workers.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, ClassVar

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from airflow_connectors.catalog import resolve_connector
from airflow_connectors.engine.context import BatchContext
from airflow_connectors.spec.errors import SpecValidationError
from airflow_connectors.spec.models import (
    ColumnSpec,
    ConnectorSpec,
    FormatSpec,
    TableSpec,
    TransportSpec,
)
from airflow_connectors.spec.types import SqlType
from airflow_connectors.transports import TRANSPORTS, Cursor, Limits, WorkItem


class _ItemPartition(InputPartition):
    def __init__(self, index: int, item: dict[str, Any]) -> None:
        super().__init__(index)
        self.index = index
        self.item = item


class _UserReader(DataSourceReader):
    """User mode: discover everything the options name and return its rows."""

    def __init__(self, ctx: BatchContext) -> None:
        self.ctx = ctx

    def partitions(self) -> list[_ItemPartition]:
        items = self.ctx.transport().discover(Cursor(), Limits(max_records=10_000_000))
        return [_ItemPartition(i, item.to_json()) for i, item in enumerate(items)]

    def read(self, partition: _ItemPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        from airflow_connectors.engine.reader import RecordRejected
        from airflow_connectors.formats.base import Decoded, conform

        item = WorkItem.from_json(partition.item)
        fmt = self.ctx.format()
        schema = self.ctx.table.arrow_schema()
        transport = self.ctx.transport()
        decodes = fmt is not None and transport.use_format(fmt)
        chunks = transport.read(item)
        if fmt is None:
            for rb in chunks:
                rows = conform(pa.Table.from_batches([rb]), self.ctx.table, schema)
                yield from rows.select(schema.names).to_batches()
            return
        blocks = (
            (c for c in chunks if isinstance(c, Decoded))
            if decodes
            else fmt.decode(chunks, final=item.final, first_record=1, at_start=item.start == 0)
        )
        for decoded in blocks:
            if decoded.errors and self.ctx.connector.errors.tolerance == "none":
                e = decoded.errors[0]
                raise RecordRejected(f"record {e.record} of {item.key}: {e.error}")
            # A transport's own blocks carry its columns after the format's: in order.
            table = conform(decoded.table, self.ctx.table, schema) if decodes else decoded.table
            # A keyed table's change columns (__op, __set) are no columns of the source.
            yield from table.select(schema.names).to_batches()


class TransportDataSource(DataSource):
    """A transport as a Spark data source; subclasses set ``transport_name``."""

    transport_name: ClassVar[str]

    @classmethod
    def name(cls) -> str:
        """The name ``spark.read.format(...)`` takes: the transport's name."""
        return cls.transport_name

    def schema(self) -> str:
        """Always raises ``ValueError``: the reader must give the schema, it is the table's columns."""
        raise ValueError(
            f"spark.read.format({self.transport_name!r}) needs a schema: call .schema('col TYPE, ...') first"
        )

    def reader(self, schema: StructType) -> DataSourceReader:
        """Reads the transport's data with the format and config given as reader options."""
        return _UserReader(_user_context(self.transport_name, dict(self.options), schema))


def _user_context(transport: str, options: dict[str, str], schema: StructType) -> BatchContext:
    fmt_name = options.pop("format", None)
    tolerance = options.pop("errors.tolerance", "none")
    if tolerance != "none":
        # A plain read has no dead-letter table: tolerated bad records would vanish.
        raise ValueError(
            f"spark.read.format({transport!r}): option errors.tolerance={tolerance!r} is not "
            "supported: a plain read has no dead-letter table, so bad records would be lost "
            "without a trace; it fails on the first bad record, naming it. Ingest through a "
            "connector with errors.tolerance: all to keep bad records in <table>__errors"
        )
    fmt_options = {
        k.removeprefix("format."): _value(v) for k, v in options.items() if k.startswith("format.")
    }
    config = (
        json.loads(options["config"])
        if "config" in options
        else {k: _value(v) for k, v in options.items() if not k.startswith("format.")}
    )
    table = TableSpec(name="spark", columns=tuple(_column(f) for f in schema.fields))
    written = ConnectorSpec(
        name="spark",
        transport=TransportSpec(name=transport, config=config),
        format=FormatSpec(name=fmt_name, config=fmt_options) if fmt_name else None,
    )
    try:
        # The one check of a connector's plugin configs, as for connectors in a spec.
        connector = resolve_connector(written, table)
    except SpecValidationError as e:
        raise ValueError(
            f"spark.read.format({transport!r}): bad options: "
            + "; ".join(str(err) for err in e.errors)
        ) from None
    return BatchContext(pipeline="spark", table=table, connector=connector, warehouse="")


def _value(v: str) -> Any:
    # Spark options are strings; JSON-looking ones (true, 10, [..], {..}) become values.
    try:
        return json.loads(v)
    except ValueError:
        return v


_SPARK_TYPES = {
    "boolean": "BOOLEAN",
    "tinyint": "TINYINT",
    "smallint": "SMALLINT",
    "int": "INT",
    "bigint": "BIGINT",
    "float": "REAL",
    "double": "DOUBLE",
    "string": "VARCHAR",
    "date": "DATE",
    "timestamp_ntz": "TIMESTAMP",
    "time(6)": "TIME",
}


def _column(f: Any) -> ColumnSpec:
    simple = f.dataType.simpleString()
    if simple.startswith("decimal("):
        p, s = simple[8:-1].split(",")
        return ColumnSpec(name=f.name, type=SqlType("DECIMAL", int(p), int(s)), nullable=f.nullable)
    if simple not in _SPARK_TYPES:
        raise ValueError(
            f"column {f.name!r}: Spark type {simple} is not supported; use one of {', '.join(_SPARK_TYPES)}, decimal(p,s)"
        )
    return ColumnSpec(name=f.name, type=SqlType(_SPARK_TYPES[simple]), nullable=f.nullable)


def _source_class(name: str) -> type[TransportDataSource]:
    cls = type(
        f"{name}_DataSource",
        (TransportDataSource,),
        {"transport_name": name, "__module__": __name__},
    )
    globals()[cls.__name__] = cls  # module attribute, so executors unpickle it by reference
    return cls


SOURCES = {name: _source_class(name) for name in TRANSPORTS.names()}


def register(spark: Any) -> None:
    """Register every transport as a Spark data source format."""
    for cls in SOURCES.values():
        spark.dataSource.register(cls)
