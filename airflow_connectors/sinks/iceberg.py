"""``iceberg``: an Apache Iceberg table per table (and one for its dead letters), kept in
pyiceberg's SQL catalog, by default in the state store's own database (SQLite or
PostgreSQL). Readable with pyiceberg, DuckDB and Spark with the Iceberg runtime.

Executors write Parquet parts under the table's ``data`` folder, one folder per batch
attempt (``data/batch-<id>/<attempt>/part-*.parquet``); nothing references them yet, so
readers never see them. ``publish`` (the driver, after the state store committed the
batch) appends the committed attempt's parts in ONE Iceberg commit (``add_files``) whose
snapshot summary carries the batch (``airflow-connectors.batch`` = ``<connector>:<id>``,
``airflow-connectors.attempt``). Before committing it looks for that mark among the
table's snapshots, so a publish rolled forward after a crash, or run twice at once,
appends nothing twice (the pattern of Iceberg's Flink sink). Works on a local warehouse
and on ``s3://`` (no renames needed: nothing is moved, the commit references the parts).

A table with a ``primary_key`` takes changes (:mod:`airflow_connectors.changes`), not
appends. Its staged parts hold the table's columns and the change columns ``__op``,
``__set`` and ``__order``, and are never added to the table. Beside it the sink keeps the
Iceberg key-state table ``<table>__keys`` in the same catalog and namespace (at
``<location>__keys``; :func:`~airflow_connectors.sinks.changes.state_schema`: per key the
mark of the last change applied and whether it deleted the key; the truncate floor as
the row whose key columns are null). ``publish`` of a keyed batch holds the table's
publish lock (:func:`~airflow_connectors.sinks.changes.table_lock`) and, unless a
snapshot of the table already carries the batch: reads the staged changes, collapses
them to one per key, reads the key state of those keys and resolves them
(:mod:`airflow_connectors.sinks.changes`); commits the key-state rows first (replacing
those keys' rows, dropping tombstones older than the table's ``tombstone_retention``),
then the table in ONE Iceberg transaction: the deleted, truncated and upserted keys'
rows deleted (copy on write), the upserts appended, its snapshots marked with the batch
as an append is. A change older than what the table holds for its key (by
``sequence_by``, then batch, then order) never wins, whichever order batches publish
in; a crash between the two commits re-applies the batch (its marks are equal), which
changes nothing twice. Columns added to the spec are added to the table first; a batch
staged before them writes them as null on the rows it upserts. The key columns are the
Iceberg schema's identifier fields (``scd_type: 1``, when they are required columns).
Keys are filtered with ``In`` up to :data:`IN_LIMIT` values, else by their range and a
join.

``scd_type: 2`` keeps history instead: the table has two more columns, ``__start_at``
and ``__end_at`` (``sequence_by``'s type, else BIGINT: the batch id), as Databricks'
AUTO CDC names them. A change ends the key's current row (``__end_at`` null) at its
sequence value and an upsert adds the key's new current row from it; a delete only
ends; a truncate ends every row it removes at its own sequence value (a truncate record
without one is refused). One version per key and batch: changes of one key within a
batch collapse to the last, as for type 1, and a change older than the key's last
applied one adds no version (the history is not re-ordered), as the ``delta`` sink does.

Fail points: ``iceberg_keys_committed`` (a keyed batch's key state committed, its table
commit not yet), ``iceberg_committed`` (the batch committed, not yet marked published by
the engine).
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import Field

from airflow_connectors import failpoints
from airflow_connectors.sinks import _fs
from airflow_connectors.sinks import changes as changes_
from airflow_connectors.sinks.base import KINDS, Kind, PartWriter, Sink, SinkConfig, SinkUnwritable
from airflow_connectors.sinks.parts import ParquetPart, blocker

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.table import Table, Transaction

#: Snapshot summary properties that mark the batch a commit appended.
BATCH_PROPERTY = "airflow-connectors.batch"
ATTEMPT_PROPERTY = "airflow-connectors.attempt"
#: Concurrent commits (another publisher of the table) are retried this many times.
COMMIT_TRIES = 20
#: ``scd_type: 2``: when a row version became the key's row (the change's sequence
#: value: ``sequence_by``'s, else the batch id), and when a later change replaced or
#: deleted it (null: the key's current row). Databricks' AUTO CDC names.
START_AT = "__start_at"
END_AT = "__end_at"


_T = TypeVar("_T")


class IcebergSinkConfig(SinkConfig):
    """Where the Iceberg table is and which SQL catalog records it."""

    catalog_uri: str | None = Field(
        default=None,
        description="SQLAlchemy URL of the database holding the Iceberg SQL catalog "
        "(sqlite:///... or postgresql+psycopg://...). Unset: the state store's database "
        "([connectors] state_store_url). A password in it is masked wherever it is shown.",
    )
    catalog_name: str = Field(
        default="airflow_connectors",
        min_length=1,
        description="Name of the catalog inside that database (what readers pass to "
        "pyiceberg's SqlCatalog).",
    )
    namespace: str | None = Field(
        default=None,
        min_length=1,
        description="Iceberg namespace of the table. Unset: the pipeline's name.",
    )
    table_name: str | None = Field(
        default=None,
        min_length=1,
        description="Iceberg table name. Unset: the table's name. Dead letters go to "
        "'<table_name>__errors' in the same namespace.",
    )
    location: str | None = Field(
        default=None,
        description="Folder (or s3://bucket/prefix) of the table's data and metadata. "
        "Unset: <warehouse>/<pipeline>/<table>, the warehouse being [connectors] warehouse.",
    )
    compression: Literal["zstd", "snappy", "gzip", "none"] = Field(
        default="zstd",
        description="Compression codec of the Parquet data files: 'zstd' (default, "
        "Iceberg's own default), 'snappy', 'gzip' or 'none'.",
    )


def file_schema(schema: pa.Schema) -> pa.Schema:
    """The Arrow schema the Parquet parts are written with: ``schema`` with TINYINT and
    SMALLINT widened to 32 bits (Iceberg's smallest integer), no field ids (``add_files``
    maps columns by name)."""
    import pyarrow as pa

    fields = [f.with_type(pa.int32()) if f.type in (pa.int8(), pa.int16()) else f for f in schema]
    return pa.schema(fields)


class IcebergSink(Sink):
    """Iceberg tables ``<namespace>.<table>`` and ``<namespace>.<table>__errors`` in a
    SQL catalog (the state store's database unless ``catalog_uri``), data and metadata
    under ``<warehouse>/<pipeline>/<table>`` (or ``location``). One Iceberg snapshot per
    batch, marked with the batch, so a re-run commits nothing twice."""

    name = "iceberg"
    #: A keyed table's batch is applied as changes (:mod:`.changes`).
    applies_changes = True
    Config = IcebergSinkConfig
    config: IcebergSinkConfig

    # --- where things are -----------------------------------------------------------

    def location(self, kind: Kind = "rows") -> str:
        """The Iceberg table's folder: ``location``, or ``<warehouse>/<pipeline>/<table>``;
        its dead-letter table beside it with ``__errors``."""
        base = self.config.location or _fs.join(self.warehouse, self.pipeline, self.table.name)
        base = base.rstrip("/")
        return base if kind == "rows" else f"{base}__errors"

    def identifier(self, kind: Kind = "rows") -> tuple[str, str]:
        """``(namespace, table)`` of the Iceberg table in the catalog."""
        name = self.config.table_name or self.table.name
        return (
            self.config.namespace or self.pipeline,
            name if kind == "rows" else f"{name}__errors",
        )

    def _batch_folder(self, batch_id: int, kind: Kind) -> str:
        return _fs.join(self.location(kind), "data", f"batch-{batch_id:010d}")

    def _attempt_folder(self, batch_id: int, attempt: str, kind: Kind) -> str:
        return _fs.join(self._batch_folder(batch_id, kind), attempt)

    def schema(self, kind: Kind = "rows") -> pa.Schema:
        """The Arrow schema of the table's Parquet parts (rows or dead letters); with
        ``scd_type: 2`` the history columns :data:`START_AT` and :data:`END_AT` follow
        the table's."""
        import pyarrow as pa

        schema = super().schema(kind)
        if kind == "rows" and self.history:
            seq = changes_.state_schema(self.table).field(changes_.SEQ).type
            schema = schema.append(pa.field(START_AT, seq)).append(pa.field(END_AT, seq))
        return file_schema(schema)

    @property
    def history(self) -> bool:
        """Whether the table keeps every version of a key (``scd_type: 2``)."""
        return self.table.keyed and self.table.scd_type == 2

    def staged_schema(self, kind: Kind = "rows") -> pa.Schema:
        """The Arrow schema of the staged parts: :meth:`schema`, and for a keyed table's
        rows the table's columns, all nullable (a delete carries its key only, a
        truncate nothing), then the change columns (``changes.change_fields()``)."""
        schema = file_schema(super().schema(kind))
        if kind != "rows" or not self.table.keyed:
            return schema
        import pyarrow as pa

        from airflow_connectors.changes import change_fields

        return pa.schema([*(f.with_nullable(True) for f in schema), *change_fields()])

    def keys_identifier(self) -> tuple[str, str]:
        """``(namespace, table)`` of the key-state table of a keyed table:
        ``<table>__keys`` beside the table."""
        namespace, name = self.identifier("rows")
        return namespace, f"{name}__keys"

    def keys_location(self) -> str:
        """The key-state table's folder: ``<location>__keys``."""
        return f"{self.location('rows')}__keys"

    def marker(self, batch_id: int) -> str:
        """The batch as the snapshot summary names it: ``<connector>:<batch id>``."""
        return f"{self.connector or ''}:{batch_id}"

    # --- the catalog ----------------------------------------------------------------

    def catalog_uri(self) -> str:
        """The catalog database's URL: ``catalog_uri``, else the state store's (told by
        the engine, else read from the settings). Holds a password: never log it."""
        if self.config.catalog_uri:
            return self.config.catalog_uri
        if self.state_store_url:
            return self.state_store_url
        from airflow_connectors.settings import Settings

        return Settings.load().state_store_url

    @contextlib.contextmanager
    def catalog(self) -> Iterator[SqlCatalog]:
        """The SQL catalog (its tables created on first use); its connections are closed
        when the block ends. Errors are one line without the URL's password."""
        from pyiceberg.catalog.sql import SqlCatalog

        uri = self.catalog_uri()
        try:
            catalog = SqlCatalog(
                self.config.catalog_name, **catalog_properties(uri, self.location())
            )
        except Exception as e:
            raise SinkUnwritable(
                f"table {self.table.name}: cannot open the Iceberg SQL catalog "
                f"{_masked(uri, uri)}: {_masked(_first_line(e), uri)}; check the sink's "
                "catalog_uri (default: the state store's URL) and that the database is reachable"
            ) from e
        try:
            yield catalog
        finally:
            catalog.engine.dispose()

    def _table(self, catalog: SqlCatalog, kind: Kind) -> Table:
        """The Iceberg table, created (with its namespace) on first use."""
        return self._open_table(
            catalog, self.identifier(kind), self.schema(kind), self.location(kind)
        )

    def _keys_table(self, catalog: SqlCatalog) -> Table:
        """The key-state table ``<table>__keys``, created on first use."""
        schema = file_schema(changes_.state_schema(self.table))
        return self._open_table(catalog, self.keys_identifier(), schema, self.keys_location())

    def _open_table(
        self, catalog: SqlCatalog, identifier: tuple[str, str], schema: pa.Schema, location: str
    ) -> Table:
        from pyiceberg.exceptions import NoSuchTableError

        namespace, name = identifier
        try:
            # Loaded first: pyiceberg's create writes a metadata file before it finds the
            # table exists, which would leave an orphan file per batch.
            return catalog.load_table((namespace, name))
        except NoSuchTableError:
            pass
        catalog.create_namespace_if_not_exists(namespace)
        return catalog.create_table_if_not_exists(
            (namespace, name),
            schema=schema,
            location=location,
            properties={
                "write.parquet.compression-codec": self.config.compression,
                # One metadata file per commit: keep the last 100, not every one.
                "write.metadata.delete-after-commit.enabled": "true",
                "write.metadata.previous-versions-max": "100",
            },
        )

    def read(self, kind: Kind = "rows") -> pa.Table | None:
        """The rows of the Iceberg table's current snapshot (through the catalog); None
        when there is no table yet. Raises OSError (one line, no password)."""
        return self._scan(kind, lambda scan: scan.to_arrow())

    def count_rows(self, kind: Kind = "rows") -> int | None:
        """The current snapshot's rows, from its manifests where no delete files apply
        (pyiceberg's ``DataScan.count``), without reading them."""
        return self._scan(kind, lambda scan: int(scan.count()))

    def _scan(self, kind: Kind, use: Callable[[Any], _T]) -> _T | None:
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        uri = self.catalog_uri()
        try:
            with self.catalog() as catalog:
                try:
                    table = catalog.load_table(self.identifier(kind))
                except (NoSuchTableError, NoSuchNamespaceError):
                    return None
                return use(table.scan())
        except SinkUnwritable as e:
            raise OSError(str(e)) from e
        except Exception as e:
            namespace, name = self.identifier(kind)
            raise OSError(
                f"cannot read the Iceberg table {namespace}.{name} at "
                f"{_masked(self.location(kind), uri)}: {_masked(_first_line(e), uri)}"
            ) from e

    # --- the staged-write protocol --------------------------------------------------

    def prepare(self, batch_id: int, attempt: str) -> None:
        """Removes what an earlier run of this attempt left; checks the warehouse can be
        written and the catalog opened (and creates the tables), before Spark starts."""
        for kind in KINDS:
            self._remove(self._attempt_folder(batch_id, attempt, kind))
        for kind in KINDS:
            location = self.location(kind)
            if not _fs.is_object_store(location):
                reason = blocker(location)
                if reason is not None:
                    raise SinkUnwritable(
                        f"table {self.table.name}: cannot write {location}: {reason}; make "
                        "it a writable folder, or point the warehouse or the sink's "
                        "location at one"
                    )
        with self.catalog() as catalog:  # the dead-letter table waits for dead letters
            self._guard(lambda: self._table(catalog, "rows"), "rows", "create")

    def writer(self, batch_id: int, attempt: str, part: int, kind: Kind) -> PartWriter:
        """Parquet files ``part-<part>-<n>.parquet`` in the attempt's folder of the table's
        ``data`` folder (a keyed table's rows with their change columns)."""
        out = ParquetPart(
            self._attempt_folder(batch_id, attempt, kind),
            lambda n: f"part-{part:05d}-{n:03d}.parquet",
            compression=self.config.compression,
            target=self.config.target_file_size,
            schema=self.staged_schema(kind),
        )
        if kind == "rows" and self.table.keyed:
            return _ChangesPart(out, self.staged_schema(kind))
        return out

    def staged_folder(self, batch_id: int, attempt: str, kind: Kind) -> str | None:
        """The attempt's folder of ``kind`` in the table's ``data`` folder."""
        return self._attempt_folder(batch_id, attempt, kind)

    def publish(self, batch_id: int, attempt: str) -> None:
        """Appends the attempt's parts to the table (then to its dead-letter table) in one
        Iceberg commit each, unless a snapshot already carries this batch; then removes
        the batch's other attempts. A keyed table's rows are applied as changes instead
        (the module docstring), and none of its batch's staged rows is kept."""
        keyed = self.table.keyed
        with self.catalog() as catalog:
            for kind in KINDS:
                if kind == "rows" and keyed:
                    self._guard(
                        lambda: self._publish_changes(catalog, batch_id, attempt),
                        kind,
                        "apply changes to",
                    )
                    continue
                parts = self.parts(batch_id, attempt, kind)
                if parts:
                    self._guard(
                        lambda k=kind, p=parts: self._append(catalog, k, batch_id, attempt, p),
                        kind,
                        "commit to",
                    )
        failpoints.reach("iceberg_committed")
        for kind in KINDS:
            if kind == "rows" and keyed:  # the commit wrote files of its own
                self._remove(self._batch_folder(batch_id, kind))
            else:
                self._discard_others(batch_id, attempt, kind)

    def discard(self, batch_id: int, attempt: str | None = None) -> None:
        """Removes the part files of an attempt (or of every attempt of the batch) that
        no commit references: only a committed attempt is ever published, and the
        engine discards only attempts that did not commit."""
        for kind in KINDS:
            if attempt is not None:
                self._remove(self._attempt_folder(batch_id, attempt, kind))
            else:
                self._remove(self._batch_folder(batch_id, kind))

    # --- helpers ----------------------------------------------------------------------

    def parts(self, batch_id: int, attempt: str, kind: Kind) -> list[str]:
        """The attempt's finished part files, as URLs (local: absolute paths)."""
        folder = self._attempt_folder(batch_id, attempt, kind)
        try:
            fs, path = _fs.filesystem(folder)
            found = _fs.files(fs, path, ".parquet")
        except OSError as e:
            raise SinkUnwritable(_fs.describe_error(folder, e)) from e
        if _fs.is_object_store(folder):
            return [f"{_fs.scheme(folder)}://{p}" for p in found]
        return found

    def committed(self, table: Table, batch_id: int, attempt: str) -> bool:
        """Whether a snapshot of ``table`` appended this batch's attempt (newest first)."""
        marker = self.marker(batch_id)
        for snapshot in reversed(table.metadata.snapshots):
            summary = snapshot.summary
            if (
                summary is not None
                and summary.get(BATCH_PROPERTY) == marker
                and summary.get(ATTEMPT_PROPERTY) == attempt
            ):
                return True
        return False

    def _append(
        self, catalog: SqlCatalog, kind: Kind, batch_id: int, attempt: str, parts: list[str]
    ) -> None:
        """One commit that appends ``parts`` and marks the batch; a commit lost to a
        concurrent writer is retried after checking the mark again."""
        from pyiceberg.exceptions import CommitFailedException
        from sqlalchemy.exc import OperationalError

        for tries in range(1, COMMIT_TRIES + 1):
            table = _without_commit_retries(self._table(catalog, kind))
            if self.committed(table, batch_id, attempt):
                return
            try:
                with table.transaction() as tx:
                    missing = set(self.schema(kind).names) - set(
                        tx.table_metadata.schema().column_names
                    )
                    if missing:  # columns added to the table spec since
                        with tx.update_schema() as update:
                            update.union_by_name(self.schema(kind))
                    tx.add_files(
                        parts,
                        snapshot_properties={
                            BATCH_PROPERTY: self.marker(batch_id),
                            ATTEMPT_PROPERTY: attempt,
                        },
                        check_duplicate_files=False,  # the batch mark guards against that
                    )
                return
            except (CommitFailedException, OperationalError):
                # Lost to a concurrent commit, or the catalog database was busy (SQLite's
                # lock): the mark is checked again before the next try.
                if tries == COMMIT_TRIES:
                    raise
                time.sleep(min(2.0, 0.05 * 2**tries) * random.uniform(0.5, 1.0))

    # --- a keyed table's changes ---------------------------------------------------------

    def _publish_changes(self, catalog: SqlCatalog, batch_id: int, attempt: str) -> None:
        """Applies the attempt's staged changes to the keyed table exactly once, holding
        the table's publish lock: the key state's commit first, then the table's one
        commit that marks the batch. A commit lost to another writer of either table, or
        a busy catalog database, is retried from the start (the mark checked again)."""
        from pyiceberg.exceptions import CommitFailedException
        from sqlalchemy.exc import OperationalError

        with changes_.table_lock(self):
            for tries in range(1, COMMIT_TRIES + 1):
                target = _without_commit_retries(self._table(catalog, "rows"))
                if self.committed(target, batch_id, attempt):
                    return
                parts = self.parts(batch_id, attempt, "rows")
                if not parts:
                    return
                try:
                    self._apply_changes(catalog, target, batch_id, attempt, parts)
                    return
                except (CommitFailedException, OperationalError):
                    if tries == COMMIT_TRIES:
                        raise
                    time.sleep(min(2.0, 0.05 * 2**tries) * random.uniform(0.5, 1.0))

    def _apply_changes(
        self, catalog: SqlCatalog, target: Table, batch_id: int, attempt: str, parts: list[str]
    ) -> None:
        """One publish of a keyed batch (the lock held, the batch not yet marked): the
        key state's commit, then the table's."""
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyiceberg.expressions import AlwaysTrue, IsNull, Or

        from airflow_connectors.changes import OP, TRUNCATE

        table = self.table
        keys = list(table.primary_key)
        marks = {BATCH_PROPERTY: self.marker(batch_id), ATTEMPT_PROPERTY: attempt}
        collapsed = changes_.collapse(self._read_staged(parts), table, batch_id)
        truncating = bool(collapsed.num_rows) and bool(
            pc.any(pc.equal(collapsed.column(OP), TRUNCATE)).as_py()
        )
        state_table = _without_commit_retries(self._keys_table(catalog))
        sschema = changes_.state_schema(table)
        if truncating:  # the truncated keys are every live key the state knows
            wanted: BooleanExpression = AlwaysTrue()
        else:
            changed = collapsed.filter(pc.is_valid(collapsed.column(keys[0]))).select(keys)
            wanted = Or(key_filter(changed, keys)[0], _pred(IsNull, keys[0]))
        known = _conform(state_table.scan(row_filter=wanted).to_arrow(), sschema)
        resolved = changes_.resolve(collapsed, known, lambda k: self._rows_of(target, k), table)
        ended = None
        if self.history and resolved.truncate is not None:
            ended = self._truncate_seq(collapsed, batch_id)

        # 1. The key state, first: a crash before the table's commit re-applies the
        # batch (equal marks apply again).
        if resolved.state.num_rows:
            self._commit_state(state_table, resolved.state, marks)
        failpoints.reach("iceberg_keys_committed")

        # 2. The table, in one transaction marked with the batch.
        if self.history:
            self._commit_history(target, resolved, known, ended, marks)
            return
        upserts = resolved.upserts.drop_columns([changes_.SEQ])
        doomed = pa.concat_tables(
            [
                resolved.deletes.select(keys),
                upserts.select(keys).cast(resolved.deletes.select(keys).schema),
            ]
        )
        with target.transaction() as tx:
            self._evolve(tx)
            schema = _arrow_schema(tx)
            if resolved.truncate is not None:
                gone = changes_.truncated_keys(known, table, resolved.truncate)
                doomed = pa.concat_tables([doomed, gone.cast(doomed.schema)])
                held = target.scan().to_arrow()
                keep = _without_keys(held, keys, doomed)
                _overwrite(tx, _rows(schema, keep, upserts), AlwaysTrue(), marks)
            elif doomed.num_rows == 0:
                tx.append(schema.empty_table(), snapshot_properties=marks)
            else:
                where, exact = key_filter(doomed, keys)
                keep = (
                    None
                    if exact
                    else _without_keys(target.scan(row_filter=where).to_arrow(), keys, doomed)
                )
                _overwrite(tx, _rows(schema, keep, upserts), where, marks)

    def _commit_state(self, state_table: Table, new: pa.Table, marks: dict[str, str]) -> None:
        """Writes key-state rows ``new`` (replacing those keys' rows, and the floor row
        when ``new`` has one) and drops tombstones older than the table's
        ``tombstone_retention``, in one transaction."""
        import pyarrow.compute as pc
        from pyiceberg.expressions import And, EqualTo, IsNull, LessThan, NotNull, Or

        keys = list(self.table.primary_key)
        has_key = pc.is_valid(new.column(keys[0]))
        where, exact = key_filter(new.filter(has_key).select(keys), keys)
        if not pc.all(has_key).as_py():  # a new floor replaces the old one
            where = Or(where, _pred(IsNull, keys[0]))
        cutoff = changes_.tombstone_cutoff_ms(self.table)
        keep = None
        if not exact:  # the other rows ``where`` matches stay (but expired tombstones)
            held = state_table.scan(row_filter=where).to_arrow()
            expired_rows = pc.and_(
                held.column(changes_.DELETED), pc.less(held.column(changes_.CHANGED_MS), cutoff)
            )
            held = held.filter(pc.and_(pc.is_valid(held.column(keys[0])), pc.invert(expired_rows)))
            keep = _without_keys(held, keys, new.filter(has_key).select(keys))
        expired = And(
            _pred(EqualTo, changes_.DELETED, True),
            And(_pred(LessThan, changes_.CHANGED_MS, cutoff), _pred(NotNull, keys[0])),
        )
        with state_table.transaction() as tx:
            schema = _arrow_schema(tx)
            with _quiet():
                tx.delete(expired, snapshot_properties=marks)
            _overwrite(tx, _rows(schema, keep, new), where, marks)

    def _truncate_seq(self, collapsed: pa.Table, batch_id: int) -> Any:
        """The sequence value of the batch's truncate (``scd_type: 2`` ends the rows it
        removes there); one line when the truncate record has none."""
        import pyarrow.compute as pc

        from airflow_connectors.changes import OP, TRUNCATE

        rows = collapsed.filter(pc.equal(collapsed.column(OP), TRUNCATE))
        value = rows.column(changes_.SEQ)[0].as_py() if rows.num_rows else None
        if value is None:
            raise SinkUnwritable(
                f"table {self.table.name}: the truncate in batch {batch_id} has no "
                f"{self.table.sequence_by} value, which scd_type 2 ends the truncated rows' "
                f"history at ({END_AT}); give truncate records a {self.table.sequence_by}, "
                "or use scd_type 1"
            )
        return value

    def _commit_history(
        self,
        target: Table,
        resolved: changes_.Resolved,
        known: pa.Table,
        ended: Any,
        marks: dict[str, str],
    ) -> None:
        """``scd_type: 2``, in one transaction marked with the batch: the current row
        (:data:`END_AT` null) of every key the batch changes ends at the change's
        sequence value (a truncate's at its own), and each upsert becomes the key's new
        current row (:data:`START_AT` its sequence value). The current rows of those
        keys are rewritten (copy on write); earlier versions are not touched."""
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyiceberg.expressions import And, IsNull

        keys = list(self.table.primary_key)
        seq_type = changes_.state_schema(self.table).field(changes_.SEQ).type
        up = resolved.upserts
        closing = pa.concat_tables(
            [
                up.select([*keys, changes_.SEQ]),
                resolved.deletes.select([*keys, changes_.SEQ]).cast(
                    up.select([*keys, changes_.SEQ]).schema
                ),
            ]
        )
        open_rows = up.drop_columns([changes_.SEQ]).append_column(
            START_AT, up.column(changes_.SEQ).cast(seq_type)
        )
        open_rows = open_rows.append_column(END_AT, pa.nulls(up.num_rows, seq_type))
        current = _pred(IsNull, END_AT)
        with target.transaction() as tx:
            self._evolve(tx)
            schema = _arrow_schema(tx)
            if resolved.truncate is not None:  # every current row may end here
                gone = changes_.truncated_keys(known, self.table, resolved.truncate)
                gone = _without_keys(gone.cast(closing.select(keys).schema), keys, closing)
                ends = pa.array([ended] * gone.num_rows, seq_type)
                closing = pa.concat_tables(
                    [closing, gone.append_column(changes_.SEQ, ends).cast(closing.schema)]
                )
                where = current
            else:
                where = And(key_filter(closing.select(keys), keys)[0], current)
            if closing.num_rows == 0:
                tx.append(schema.empty_table(), snapshot_properties=marks)
                return
            held = target.scan(row_filter=where).to_arrow()
            hits = _key_hits(held, keys, closing) if held.num_rows else None
            keep = held if hits is None else held.filter(pc.invert(hits))
            ended_rows = None
            if hits is not None and pc.any(hits).as_py():
                closed = held.filter(hits).drop_columns([END_AT])
                ends_at = closing.select([*keys, changes_.SEQ]).rename_columns([*keys, END_AT])
                ends_at = ends_at.cast(
                    pa.schema([*closed.select(keys).schema, pa.field(END_AT, seq_type)])
                )
                ended_rows = closed.join(ends_at, keys, join_type="inner", use_threads=False)
            _overwrite(tx, _rows(schema, keep, ended_rows, open_rows), where, marks)

    def _rows_of(self, target: Table, keys: pa.Table) -> pa.Table:
        """The table's rows of ``keys`` (for partial updates; with history, the keys'
        current rows)."""
        from pyiceberg.expressions import And, IsNull

        names = list(self.table.primary_key)
        where, exact = key_filter(keys, names)
        if self.history:
            where = And(where, _pred(IsNull, END_AT))
        rows = target.scan(row_filter=where).to_arrow()
        if exact or rows.num_rows == 0:
            return rows
        return _with_keys(rows, names, keys)

    def _evolve(self, tx: Transaction) -> None:
        """Adds the columns the table spec has and the Iceberg table lacks, and makes the
        key columns the schema's identifier fields (Iceberg's row identity, which
        readers and upserting writers use) when they are required columns."""
        current = tx.table_metadata.schema()
        missing = set(self.schema("rows").names) - set(current.column_names)
        keys = set(self.table.primary_key)
        named = {current.find_column_name(i) for i in current.identifier_field_ids}
        required = {f.name for f in current.fields if f.required}
        identify = not self.history and named != keys and keys <= required
        if missing or identify:
            with tx.update_schema() as update:
                if missing:
                    update.union_by_name(self.schema("rows"))
                if identify:
                    update.set_identifier_fields(*self.table.primary_key)

    def _read_staged(self, parts: list[str]) -> pa.Table:
        """The staged changes of ``parts``, in the staged schema of the table spec (a
        column a part lacks, staged before it was added: null)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = self.staged_schema("rows")
        tables = []
        for url in parts:
            fs, path = _fs.filesystem(url)
            tables.append(_conform(pq.read_table(path, filesystem=fs), schema))
        return pa.concat_tables(tables) if tables else schema.empty_table()

    def _guard(self, action: Any, kind: Kind, verb: str) -> Any:
        """Runs ``action``; any error becomes one line naming the Iceberg table."""
        try:
            return action()
        except SinkUnwritable:
            raise
        except Exception as e:
            uri = self.catalog_uri()
            namespace, name = self.identifier(kind)
            raise SinkUnwritable(
                f"table {self.table.name}: cannot {verb} the Iceberg table {namespace}.{name} "
                f"at {_masked(self.location(kind), uri)}: {_masked(_first_line(e), uri)}"
            ) from e

    def _discard_others(self, batch_id: int, attempt: str, kind: Kind) -> None:
        """Removes the batch's other attempt folders, and temporary files a failed
        Spark task left in the committed one's (neither is referenced by the table)."""
        from pyarrow import fs as pafs

        folder = self._batch_folder(batch_id, kind)
        with contextlib.suppress(OSError):  # leftovers only
            fs, path = _fs.filesystem(folder)
            for info in fs.get_file_info(pafs.FileSelector(path, allow_not_found=True)):
                if info.type == pafs.FileType.Directory and info.base_name != attempt:
                    _fs.remove_tree(fs, info.path)
                elif info.type == pafs.FileType.Directory:
                    for stray in _fs.files(fs, info.path, ".tmp"):
                        fs.delete_file(stray)

    def _remove(self, folder: str) -> None:
        try:
            fs, path = _fs.filesystem(folder)
            _fs.remove_tree(fs, path)
        except OSError:
            pass


def _without_commit_retries(table: Table) -> Table:
    """``table`` whose commits are not retried by pyiceberg. pyiceberg re-applies an
    append that lost a race onto the winner's metadata, past the batch check: a
    concurrent publisher of the same batch would append it twice. The sink retries
    itself, checking the mark first. Only this object's view of the properties
    changes; the table's stored properties are untouched (other writers keep theirs)."""
    from pyiceberg.table import TableProperties

    props = {**table.metadata.properties, TableProperties.COMMIT_NUM_RETRIES: "0"}
    table.metadata = table.metadata.model_copy(update={"properties": props})
    return table


class _ChangesPart(PartWriter):
    """A keyed table's part: rows given without change columns are upserts
    (``changes.with_change_columns``); columns put in the staged schema's order."""

    def __init__(self, out: ParquetPart, schema: pa.Schema) -> None:
        self.out = out
        self.names = schema.names

    def write(self, table: pa.Table) -> None:
        self.out.write(changes_.with_change_columns(table).select(self.names))

    def close(self) -> int:
        return self.out.close()

    def abort(self) -> None:
        self.out.abort()


#: Up to this many distinct values a key column is filtered with ``In``; above, with its
#: range (pyiceberg binds an ``In`` literal by literal, several times per commit).
IN_LIMIT = 1000


def key_filter(keys: pa.Table, names: list[str]) -> tuple[BooleanExpression, bool]:
    """An Iceberg row filter matching the rows whose key is among ``keys`` (the key
    columns ``names``), and whether it matches exactly those. Per key column: ``In``
    its values (up to :data:`IN_LIMIT` of them), else its range (min to max); a
    composite key ANDs them. Only one key column's ``In`` is exact; the others match
    more rows, which the caller narrows with a join. A value pyiceberg has no literal
    for gives ``AlwaysTrue`` (the whole table, narrowed the same way)."""
    import pyarrow.compute as pc
    from pyiceberg.expressions import (
        AlwaysFalse,
        AlwaysTrue,
        And,
        GreaterThanOrEqual,
        In,
        LessThanOrEqual,
    )

    if keys.num_rows == 0:
        return AlwaysFalse(), True
    exact = len(names) == 1
    parts: list[BooleanExpression] = []
    try:
        for n in names:
            values = keys.column(n).unique()
            if len(values) <= IN_LIMIT:
                parts.append(_pred(In, n, set(values.to_pylist())))
                continue
            exact = False
            bounds = pc.min_max(values).as_py()
            parts.append(_pred(GreaterThanOrEqual, n, bounds["min"]))
            parts.append(_pred(LessThanOrEqual, n, bounds["max"]))
    except TypeError:
        return AlwaysTrue(), False
    out = parts[0]
    for p in parts[1:]:
        out = And(out, p)
    return out, exact


def _pred(kind: Any, name: str, *value: Any) -> BooleanExpression:
    """The pyiceberg predicate ``kind`` on column ``name`` (with ``value``, if any),
    built as pyiceberg's own docs do (its pydantic models confuse the type checker)."""
    made: BooleanExpression = kind(name, *value)
    return made


def _key_hits(rows: pa.Table, names: list[str], keys: pa.Table) -> pa.ChunkedArray:
    """Per row of ``rows``: whether its key is among ``keys``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    wanted = keys.select(names).cast(rows.select(names).schema)
    wanted = wanted.group_by(names, use_threads=False).aggregate([])
    wanted = wanted.append_column("__hit", pa.array([True] * wanted.num_rows))
    indexed = rows.select(names).append_column("__row", pa.array(range(rows.num_rows), pa.int64()))
    joined = indexed.join(wanted, names, join_type="left outer", use_threads=False)
    return pc.fill_null(joined.sort_by("__row").column("__hit"), False)


def _without_keys(rows: pa.Table, names: list[str], keys: pa.Table) -> pa.Table:
    import pyarrow.compute as pc

    if rows.num_rows == 0 or keys.num_rows == 0:
        return rows
    return rows.filter(pc.invert(_key_hits(rows, names, keys)))


def _with_keys(rows: pa.Table, names: list[str], keys: pa.Table) -> pa.Table:
    if rows.num_rows == 0:
        return rows
    return rows.filter(_key_hits(rows, names, keys))


def _conform(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """``rows`` in ``schema``: its columns by name, cast; a missing one null."""
    import pyarrow as pa

    n = rows.num_rows
    have = set(rows.column_names)
    columns = [
        rows.column(f.name).cast(f.type) if f.name in have else pa.nulls(n, f.type) for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def _arrow_schema(tx: Transaction) -> pa.Schema:
    """The Arrow schema of the transaction's table (its columns as pyiceberg writes)."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    return schema_to_pyarrow(tx.table_metadata.schema(), include_field_ids=False)


def _rows(schema: pa.Schema, *tables: pa.Table | None) -> pa.Table:
    import pyarrow as pa

    return pa.concat_tables([_conform(t, schema) for t in tables if t is not None])


def _overwrite(
    tx: Transaction, rows: pa.Table, where: BooleanExpression, marks: dict[str, str]
) -> None:
    """Deletes the rows ``where`` matches, appends ``rows``: snapshots of one commit,
    each marked with ``marks``."""
    with _quiet():
        tx.overwrite(rows, overwrite_filter=where, snapshot_properties=marks)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Without pyiceberg's warning that a delete matched no rows (expected here)."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Delete operation did not match any records")
        yield


def catalog_properties(uri: str, location: str) -> dict[str, str]:
    """pyiceberg SqlCatalog properties: the database URL and, for a table on S3, the
    endpoint, region and credentials from the AWS environment (as :mod:`._fs` reads
    them)."""
    from airflow_connectors.connections.aws import AwsSettings

    props = {"uri": uri, "init_catalog_tables": "true"}
    if _fs.is_object_store(location):
        props.update(AwsSettings.from_environment().iceberg_properties())
    return props


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__


def _masked(text: str, uri: str) -> str:
    """``text`` with URL passwords, the catalog URL's secrets and the AWS secrets masked."""
    from airflow_connectors.spec.redact import mask_text, mask_url, secret_values

    secrets = [*secret_values({"catalog_uri": uri})]
    secrets += [
        v for k in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN") if (v := os.environ.get(k))
    ]
    return mask_url(mask_text(text, secrets))
