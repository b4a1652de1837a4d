"""``delta``: a Delta Lake table at ``<warehouse>/<pipeline>/<table>`` (a local folder or
``s3://bucket/prefix``), written with delta-rs (the ``deltalake`` package, no JVM).
Readable with ``deltalake``, DuckDB, Polars and, with delta-spark, Spark. Bad records go
to the Delta table ``<table>__errors`` beside it.

Executors write each part as a Parquet file inside the table folder, under
``batch-<id>/<attempt>/``: Delta readers see only files its log lists, so a crashed
attempt's files are invisible. ``publish`` (on the driver, after the state store
committed the batch) adds all of the committed attempt's files in ONE Delta commit that
also records the batch as an app transaction (``SetTransaction``: ``app_id`` =
``<pipeline>.<table>.<connector>``, ``version`` = batch id). A re-run of ``publish``
after a crash anywhere finds the batch recorded and adds nothing, so readers see a batch
all at once or not at all, and exactly once.

Batches of one connector may publish out of order (``tasks_max`` > 1 runs batches side
by side): a batch whose id is below the connector's recorded version is looked up among
the table's files and its commits (custom commit metadata) before it is added. Every
commit of a connector sets its app transaction, so two runs publishing the same batch at
once conflict in Delta's optimistic concurrency and the loser re-checks; connectors of one
table have their own app ids and their appends are retried by delta-rs.

A batch that added columns (``schema_evolution: add_new_columns``) cannot be added as
staged files (an add-files commit keeps the table's schema): its rows are written again
by delta-rs with ``schema_mode="merge"``, in ONE commit that changes the schema, adds the
rows and records the app transaction; earlier files read the new columns as null.

A keyed table (``primary_key``) takes changes (:mod:`airflow_connectors.changes`) and
publishes them instead of adding files. Under the table's publish lock
(:func:`~airflow_connectors.sinks.changes.table_lock`), unless the batch is recorded: the
attempt's staged parts are read, collapsed per key and resolved against the key-state
table ``<path>__keys`` (a Delta table beside the table: per key the mark of its last
change and whether it deleted the key; read by a semi-join of its files with the batch's
keys). The key states are committed first (one MERGE; tombstones older than the table's
``tombstone_retention`` go), then the table: ONE delta-rs MERGE on the key columns
(deletes, then updates and inserts; a truncate deletes the rows no change of the batch
names, in the same MERGE) that records the batch as the connector's app transaction, and
adds the columns a widened batch brought (``merge_schema``). A batch that changes nothing
is recorded by an empty commit. A crash between the two commits re-applies the batch on
the re-run (its marks equal the stored ones). The staged parts are never added (the MERGE
writes files of its own) and are dropped after the commit.

``scd_type: 2`` keeps history instead: the table has two more columns, ``__start_at``
and ``__end_at`` (``sequence_by``'s type, else BIGINT: the batch id), as Databricks'
AUTO CDC names them. A change closes the key's current row (``__end_at`` null) at its
sequence value and an upsert inserts the key's new current row from it; a delete only
closes; a truncate closes every row it removes at its own sequence value (a truncate
record without one is refused). One version per key and batch: changes of one key within
a batch collapse to the last, as for type 1, and a change older than the key's last
applied one adds no version (the history is not re-ordered).

Fail points: ``delta_keys_committed`` (a keyed table: after the key-state commit, before
the MERGE) and ``delta_committed`` (after the Delta commit of the rows, before the state
store records the batch published).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from airflow_connectors import failpoints
from airflow_connectors.changes import CHANGE_COLUMNS, ORDER
from airflow_connectors.sinks import _fs
from airflow_connectors.sinks.base import KINDS, Kind, PartWriter, Sink, SinkConfig, SinkUnwritable
from airflow_connectors.sinks.parts import ParquetPart, blocker

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable

#: Custom commit metadata key naming the batch a commit added: ``<app_id>#<batch_id>``.
BATCH_KEY = "airflow_connectors.batch"
#: How far before an attempt's oldest file its commit is searched for (clock skew).
HISTORY_MARGIN_MS = 3_600_000
#: Variables of the Azure environment that hold secrets (masked in messages).
_AZURE_SECRETS = ("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_TOKEN")
#: Times publish re-reads the table after a conflicting concurrent commit.
MAX_CONFLICTS = 20
#: The key-state table of a keyed table is ``<location>__keys``.
KEYS_SUFFIX = "__keys"
#: The column of a keyed batch's MERGE source that marks a row to delete.
DELETE_FLAG = "__airflow_connectors_delete"
#: ``scd_type: 2``: when a row version became the key's row (the change's sequence
#: value: ``sequence_by``'s, else the batch id), and when a later change replaced or
#: deleted it (null: the key's current row).
START_AT = "__start_at"
END_AT = "__end_at"
#: ``scd_type: 2`` MERGE source columns: the key closing rows match by (prefix), and the
#: flag of the rows to insert.
_MERGE_KEY = "__airflow_connectors_key_"
OPEN_FLAG = "__airflow_connectors_open"

REMEDY = (
    "make it writable, or point the warehouse (--warehouse, [connectors] warehouse) or "
    "the table's sink path at a writable folder or s3:// prefix"
)


class DeltaSinkConfig(SinkConfig):
    """Where the Delta table goes and how its Parquet files are compressed."""

    path: str | None = Field(
        default=None,
        description="Location of the Delta table: a folder, an s3://bucket/prefix URL "
        "(credentials and endpoint from the AWS_* environment) or an az://container/path "
        "URL (from the AZURE_STORAGE_* environment). Dead letters go to the "
        "Delta table '<path>__errors' beside it. Unset: <warehouse>/<pipeline>/<table>.",
    )
    compression: Literal["snappy", "zstd", "gzip", "none"] = Field(
        default="snappy",
        description="Compression codec of the table's Parquet files: 'snappy' (default), "
        "'zstd', 'gzip' or 'none'.",
    )


# --- locations and filesystems ----------------------------------------------------


def storage_options(uri: str) -> dict[str, str] | None:
    """delta-rs storage options for ``uri``: for S3 the ``AWS_*`` environment the
    executors' filesystem uses too (:mod:`._fs`: endpoint, credentials, region; plain
    HTTP allowed for an ``http://`` endpoint), else None."""
    from airflow_connectors.connections.aws import AwsSettings
    from airflow_connectors.connections.gcp import GcpSettings

    if not _fs.is_object_store(uri):
        return None
    if _fs.scheme(uri) in _fs.AZURE_SCHEMES:
        return _fs.azure_settings(uri).storage_options()
    if _fs.scheme(uri) in _fs.GCS_SCHEMES:
        return GcpSettings.from_environment().storage_options()
    return AwsSettings.from_environment().storage_options()


def _why(e: BaseException) -> str:
    """The first line of an error, secrets of the AWS environment masked."""
    from airflow_connectors.spec.redact import mask_text

    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    text = lines[0] if lines else type(e).__name__
    names = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", *_AZURE_SECRETS)
    return mask_text(text, [v for v in (os.environ.get(n) for n in names) if v])


# --- the sink (driver) --------------------------------------------------------------


class _PartsGone(Exception):
    """A staged part listed a moment ago is gone: another publisher of the batch
    committed it and dropped the staged files. The caller looks again."""


@dataclass
class _Part:
    path: str  # relative to the table root
    size: int
    mtime_ms: int
    stats: str
    columns: tuple[str, ...] = ()


class DeltaSink(Sink):
    """A Delta Lake table at ``<warehouse>/<pipeline>/<table>`` (or ``path``), dead
    letters in ``<path>__errors``; each batch is one Delta commit recorded as the
    connector's app transaction."""

    name = "delta"
    #: A keyed table's batch is applied as changes (:mod:`.changes`).
    applies_changes = True
    Config = DeltaSinkConfig
    config: DeltaSinkConfig
    #: Whether the last publish merged new columns into the table (see
    #: :meth:`_append_merging`).
    merged = False

    def location(self, kind: Kind = "rows") -> str:
        """``path``, or ``<warehouse>/<pipeline>/<table>``; dead letters beside it with ``__errors``."""
        base = self.config.path or _fs.join(self.warehouse, self.pipeline, self.table.name)
        base = base.rstrip("/")
        if not _fs.scheme(base):
            base = os.path.abspath(base)
        return base if kind == "rows" else f"{base}__errors"

    @property
    def app_id(self) -> str:
        """The Delta app transaction id of this sink's connector."""
        return f"{self.pipeline}.{self.table.name}.{self.connector or 'sink'}"

    def schema(self, kind: Kind = "rows") -> pa.Schema:
        """The table's Arrow schema as the Delta table holds it: with ``scd_type: 2``
        the history columns :data:`START_AT` and :data:`END_AT` follow the table's."""
        import pyarrow as pa

        schema = super().schema(kind)
        if kind == "rows" and self.table.keyed and self.table.scd_type == 2:
            from airflow_connectors.sinks import changes as ch

            seq = ch.state_schema(self.table).field(ch.SEQ).type
            schema = schema.append(pa.field(START_AT, seq)).append(pa.field(END_AT, seq))
        return schema

    def _attempt_dir(self, kind: Kind, batch_id: int, attempt: str | None = None) -> str:
        batch = _fs.join(self.location(kind), f"batch-{batch_id:010d}")
        return batch if attempt is None else _fs.join(batch, attempt)

    def read(self, kind: Kind = "rows") -> pa.Table | None:
        """The rows of the Delta table's current version (through its log); None when
        there is no table yet."""
        try:
            dt = self._open(kind)
            return None if dt is None else self._read_files(dt, kind)
        except Exception as e:
            raise OSError(f"cannot read the Delta table at {self.location(kind)}: {_why(e)}") from e

    def count_rows(self, kind: Kind = "rows") -> int | None:
        """The current version's rows from its data files' footers (the log lists the
        files); a table with reader features or partitions is read as :meth:`read`."""
        try:
            dt = self._open(kind)
            if dt is None:
                return None
            dataset = self._files_dataset(dt, kind)
            if dataset is None:
                return int(self._read_files(dt, kind).num_rows)
            return int(dataset.count_rows())
        except Exception as e:
            raise OSError(f"cannot read the Delta table at {self.location(kind)}: {_why(e)}") from e

    def _files_dataset(self, dt: DeltaTable, kind: Kind) -> Any:
        """The current version's files as a pyarrow dataset, or None where deltalake must
        read them (partition columns, reader features such as deletion vectors)."""
        import pyarrow as pa
        import pyarrow.dataset as ds

        if dt.metadata().partition_columns or dt.protocol().reader_features:
            return None
        fs, _ = _fs.filesystem(self.location(kind))
        paths = [_path_in_filesystem(uri) for uri in dt.file_uris()]
        schema = pa.schema(dt.schema().to_arrow())
        return ds.dataset(paths, schema=schema, format="parquet", filesystem=fs)

    def _read_files(self, dt: DeltaTable, kind: Kind) -> pa.Table:
        """The current version's data files (as the log lists them) read by pyarrow
        with the table's schema (files written before a column was added read it as
        null). deltalake's own ``to_pyarrow_table`` reads through a Python filesystem
        handler after which about every other short-lived process aborted at exit
        ("terminate called without an active exception", deltalake 1.6 with pyarrow
        26): ``airflow-connectors run`` printed its summary, then exited 134. Tables
        this sink did not write alone (partition columns, reader features such as
        deletion vectors or column mapping) are still read by deltalake."""
        dataset = self._files_dataset(dt, kind)
        return dt.to_pyarrow_table() if dataset is None else dataset.to_table()

    # -- prepare -------------------------------------------------------------------

    def prepare(self, batch_id: int, attempt: str) -> None:
        """Checks, on the driver before Spark starts, that the table's types exist in
        Delta, that its location can be written, and that an existing table has the
        table's columns; removes anything of this attempt."""
        self._check_types()
        for kind in KINDS:
            self._check_writable(self.location(kind))
        dt = self._open("rows")
        if dt is not None:
            self._check_schema(dt, "rows")
        self.discard(batch_id, attempt)

    def _check_types(self) -> None:
        from deltalake import Schema

        for field in self.schema("rows"):
            try:
                Schema.from_arrow(_one(field))
            except Exception as e:
                raise SinkUnwritable(
                    f"table {self.table.name}: column {field.name} has type {field.type}, "
                    f"which Delta Lake cannot store ({_why(e)}); declare it VARCHAR or "
                    "TIMESTAMP, or use the parquet sink"
                ) from e

    def _check_writable(self, uri: str) -> None:
        where = f"table {self.table.name}: cannot write {uri}"
        if _fs.is_object_store(uri):
            import pyarrow.fs as pafs

            try:
                fs, path = _fs.filesystem(uri)
                bucket = fs.get_file_info(path.split("/", 1)[0])  # the bucket answers
                fs.get_file_info(path)
            except (OSError, ValueError) as e:
                message = _fs.describe_error(uri, e)
                raise SinkUnwritable(f"table {self.table.name}: {message}; {REMEDY}") from e
            if bucket.type == pafs.FileType.NotFound:
                raise SinkUnwritable(
                    f"{where}: bucket {_fs.bucket_of(uri)} does not exist; create the bucket "
                    "or point the warehouse or the table's sink path at an existing one"
                )
            return
        reason = blocker(uri)
        if reason is not None:
            raise SinkUnwritable(f"{where}: {reason}; {REMEDY}")

    def _open(self, kind: Kind) -> DeltaTable | None:
        """The Delta table at ``location(kind)``, or None when there is none yet."""
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        uri = self.location(kind)
        try:
            return DeltaTable(uri, storage_options=storage_options(uri))
        except TableNotFoundError:
            return None
        except OSError as e:
            raise SinkUnwritable(f"table {self.table.name}: cannot read {uri}: {_why(e)}") from e

    def _check_schema(self, dt: DeltaTable, kind: Kind) -> None:
        from deltalake import Schema

        want = json.loads(Schema.from_arrow(self.schema(kind)).to_json())["fields"]
        have = json.loads(dt.schema().to_json())["fields"]

        def cols(fields: list[dict[str, Any]]) -> list[str]:
            return [
                f"{f['name']} {f['type'] if isinstance(f['type'], str) else 'struct'}"
                f"{'' if f.get('nullable', True) else ' not null'}"
                for f in fields
            ]

        if self.table.evolution == "add_new_columns" and kind == "rows":
            # Columns the table gained (schema versions only add columns): the Delta
            # table takes them in the commit of the batch that brings them.
            ok = set(cols(have)) <= set(cols(want))
        else:
            ok = cols(want) == cols(have)
        if not ok:
            raise SinkUnwritable(
                f"table {self.table.name}: the Delta table at {self.location(kind)} has "
                f"columns ({', '.join(cols(have))}) but the pipeline declares "
                f"({', '.join(cols(want))}); point the table's sink path at another "
                "location or drop the existing table"
            )

    # -- writer --------------------------------------------------------------------

    def writer(self, batch_id: int, attempt: str, part: int, kind: Kind) -> PartWriter:
        """Parquet files of part ``part`` in ``<table>/batch-<id>/<attempt>/`` (invisible
        to readers until the batch's commit lists them)."""
        folder = self._attempt_dir(kind, batch_id, attempt)
        return ParquetPart(
            folder,
            lambda n: f"part-{part:05d}-{n:03d}.parquet",
            compression=self.config.compression,
            target=self.config.target_file_size,
            failed=lambda e: SinkUnwritable(f"{_fs.describe_error(folder, e)}; {REMEDY}"),
        )

    def staged_folder(self, batch_id: int, attempt: str, kind: Kind) -> str | None:
        """The attempt's folder of ``kind`` inside the table (its commit lists it)."""
        return self._attempt_dir(kind, batch_id, attempt)

    # -- publish -------------------------------------------------------------------

    def publish(self, batch_id: int, attempt: str) -> None:
        """Commits the attempt's dead letters, then its rows, each in one Delta commit
        recording the batch as the connector's app transaction; a batch already
        recorded is not added again. Then removes other attempts of the batch. A keyed
        table's changes are merged instead (:meth:`_publish_changes`)."""
        self.merged = False
        self._commit("errors", batch_id, attempt)
        if self.table.keyed:
            self._publish_changes(batch_id, attempt)
            return
        self._commit("rows", batch_id, attempt)
        failpoints.reach("delta_committed")
        for kind in KINDS:
            # A commit that merged columns wrote the rows anew: its staged files are
            # listed nowhere and go too (a listed file is never removed).
            self._drop_attempts(kind, batch_id, keep=None if self.merged else attempt)

    def _commit(self, kind: Kind, batch_id: int, attempt: str) -> None:
        from deltalake.exceptions import CommitFailedError

        for _ in range(MAX_CONFLICTS):
            try:
                if self._commit_once(kind, batch_id, attempt):
                    return
            except (CommitFailedError, _PartsGone):
                continue  # a concurrent commit of this connector: look again
        raise SinkUnwritable(
            f"table {self.table.name}: batch {batch_id} met {MAX_CONFLICTS} conflicting "
            f"concurrent commits to {self.location(kind)}; the next run retries it"
        )

    def _commit_once(self, kind: Kind, batch_id: int, attempt: str) -> bool:
        """One try of :meth:`_commit`: True when the batch is in the table, False to
        look again (another publisher created the table, or committed the batch and
        dropped its staged files while this one read them)."""
        from deltalake.exceptions import CommitFailedError, DeltaError

        dt = self._open(kind)
        parts = self._parts(kind, batch_id, attempt)
        if dt is not None and self._recorded(dt, batch_id, attempt, parts):
            return True
        if not parts and (kind == "errors" or dt is not None):
            return True  # nothing to add; an empty batch still creates the rows table
        try:
            if dt is None:
                self._create(kind, batch_id, attempt, parts)
                created = self._open(kind)
                if created is not None:
                    self._declare_invariants(created)
            else:
                self._check_schema(dt, kind)
                self._declare_invariants(dt)
                if self._new_columns(dt, parts):
                    self._append_merging(dt, kind, batch_id, attempt, parts)
                else:
                    self._append(dt, kind, batch_id, attempt, parts)
            return True
        except CommitFailedError:
            raise
        except DeltaError as e:
            if self._gone(kind, parts) or (dt is None and "already exists" in str(e)):
                return False
            raise SinkUnwritable(
                f"table {self.table.name}: cannot commit batch {batch_id} to the Delta "
                f"table at {self.location(kind)}: {_why(e)}"
            ) from e
        except OSError as e:
            if self._gone(kind, parts):
                return False
            raise SinkUnwritable(
                f"table {self.table.name}: cannot commit batch {batch_id} to the Delta "
                f"table at {self.location(kind)}: {_why(e)}; {REMEDY}"
            ) from e

    def _declare_invariants(self, dt: DeltaTable) -> None:
        """List the ``invariants`` writer feature when the table needs it. delta-rs gives a
        table with a TIMESTAMP column protocol 3/7 (``timestampNtz``) but leaves out
        ``invariants``, which a NOT NULL column needs there (delta-io/delta-rs#2882); Spark's
        Delta reader then refuses the whole table. One protocol-only commit, once."""
        protocol = dt.protocol()
        if protocol.min_writer_version < 7 or "invariants" in (protocol.writer_features or []):
            return
        if all(field.nullable for field in dt.schema().fields):
            return
        from deltalake import TableFeatures

        dt.alter.add_feature(TableFeatures.Invariants, allow_protocol_versions_increase=True)

    def _recorded(self, dt: DeltaTable, batch_id: int, attempt: str, parts: list[_Part]) -> bool:
        """Whether the table holds the committed attempt already. Below the connector's
        app transaction it cannot (the common case, decided without reading the log's
        files). At or past it the attempt is looked up: its files in the table, or a
        commit naming it (its files since compacted away). That covers a re-run after a
        crash, a later batch of the connector published first (``tasks_max`` > 1), and
        a state store started afresh whose batch ids an older life of the connector
        already used. Commits are searched back to an hour before the attempt's oldest
        file was written (no commit of the attempt can be older)."""
        version = dt.transaction_version(self.app_id)
        if version is None or version < batch_id:
            return False
        prefix = f"batch-{batch_id:010d}/{attempt}/"
        paths = dt.get_add_actions().column("path").to_pylist()
        if any(str(p).startswith(prefix) for p in paths):
            return True
        mark = self._mark(batch_id, attempt)
        since = min((p.mtime_ms for p in parts), default=0) - HISTORY_MARGIN_MS
        limit = 64
        while True:
            commits = dt.history(limit)
            if any(c.get(BATCH_KEY) == mark for c in commits):
                return True
            if len(commits) < limit or int(commits[-1].get("timestamp") or 0) < since:
                return False
            limit *= 4

    def _mark(self, batch_id: int, attempt: str) -> str:
        """What a batch's commits carry under :data:`BATCH_KEY`."""
        return f"{self.app_id}#{batch_id}#{attempt}"

    def _parts(self, kind: Kind, batch_id: int, attempt: str) -> list[_Part]:
        """The attempt's finished Parquet files, with their sizes and statistics."""
        import pyarrow.fs as pafs
        import pyarrow.parquet as pq

        uri = self._attempt_dir(kind, batch_id, attempt)
        fs, folder = _fs.filesystem(uri)
        root = _fs.filesystem(self.location(kind))[1]
        try:
            infos = fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
            if kind == "rows":
                failpoints.reach("delta_rows_listed")
            parts = []
            for info in sorted(infos, key=lambda i: i.path):
                name = info.base_name
                if info.type != pafs.FileType.File or not name.endswith(".parquet"):
                    continue
                if name.startswith((".", "_")):
                    continue
                try:
                    with fs.open_input_file(info.path) as fh:
                        meta = pq.read_metadata(fh)
                except OSError as e:  # gone (FileNotFoundError locally, not on S3)
                    if fs.get_file_info(info.path).type == pafs.FileType.NotFound:
                        raise _PartsGone(info.path) from e
                    raise
                mtime = info.mtime.timestamp() if info.mtime is not None else time.time()
                parts.append(
                    _Part(
                        info.path[len(root) + 1 :],
                        int(info.size or 0),
                        int(mtime * 1000),
                        _stats(meta),
                        tuple(meta.schema.to_arrow_schema().names),
                    )
                )
        except OSError as e:
            raise SinkUnwritable(
                f"table {self.table.name}: cannot read the parts of batch {batch_id} at "
                f"{uri}: {_why(e)}"
            ) from e
        return parts

    def _gone(self, kind: Kind, parts: list[_Part]) -> bool:
        """Whether a listed part is no longer there: a publisher racing this one (a
        re-run of the batch) committed it and dropped the staged files."""
        import pyarrow.fs as pafs

        if not parts:
            return False
        fs, root = _fs.filesystem(self.location(kind))
        try:
            infos = fs.get_file_info([f"{root}/{p.path}" for p in parts])
        except OSError:
            return False
        return any(i.type == pafs.FileType.NotFound for i in infos)

    def _actions(self, parts: list[_Part]) -> list[Any]:
        from deltalake.transaction import AddAction

        return [AddAction(p.path, p.size, {}, p.mtime_ms, True, p.stats) for p in parts]

    def _properties(
        self, batch_id: int, attempt: str, version: int, retries: int | None = None
    ) -> Any:
        from deltalake import CommitProperties, Transaction

        return CommitProperties(
            custom_metadata={BATCH_KEY: self._mark(batch_id, attempt)},
            app_transactions=[Transaction(self.app_id, version)],
            max_commit_retries=retries,
        )

    def _create(self, kind: Kind, batch_id: int, attempt: str, parts: list[_Part]) -> None:
        from deltalake import Schema
        from deltalake.transaction import create_table_with_add_actions

        uri = self.location(kind)
        create_table_with_add_actions(
            uri,
            Schema.from_arrow(self.schema(kind)),
            self._actions(parts),
            mode="error",
            name=self.table.name if kind == "rows" else f"{self.table.name}__errors",
            storage_options=storage_options(uri),
            # No retry by delta-rs: a creator that lost the race for version 0 would
            # commit a second CREATE TABLE of the batch as version 1 (seen with four
            # concurrent publishers, locally and on Azure); here it looks again instead.
            commit_properties=self._properties(batch_id, attempt, batch_id, retries=0),
        )

    def _append(
        self, dt: DeltaTable, kind: Kind, batch_id: int, attempt: str, parts: list[_Part]
    ) -> None:
        # The version never goes down (a batch published after a later one keeps the
        # later id), and setting it on every commit makes two runs publishing for the
        # connector at once conflict instead of both adding.
        version = max(batch_id, dt.transaction_version(self.app_id) or -1)
        dt.create_write_transaction(
            self._actions(parts),
            "append",
            self.schema(kind),
            # No rebase-and-retry by delta-rs: it finds no conflict between two
            # publishers' app transactions and would commit the batch twice; a
            # conflict comes back here, and the loop looks again (_recorded).
            commit_properties=self._properties(batch_id, attempt, version, retries=0),
        )

    def _new_columns(self, dt: DeltaTable, parts: list[_Part]) -> list[str]:
        """The columns of the attempt's parts the Delta table lacks (a batch that added
        columns, ``schema_evolution: add_new_columns``)."""
        if not parts:
            return []
        have = {f.name for f in dt.schema().fields}
        return [n for n in parts[0].columns if n not in have]

    def _append_merging(
        self, dt: DeltaTable, kind: Kind, batch_id: int, attempt: str, parts: list[_Part]
    ) -> None:
        """The batch's rows with the columns it added, in ONE Delta commit that also
        changes the table's schema (delta-rs ``schema_mode="merge"``) and records the
        batch as the connector's app transaction. delta-rs writes the rows again as
        files of its own (adding staged files cannot change the schema); the staged
        ones are dropped after the commit. Earlier files read the new columns as null."""
        import pyarrow as pa
        import pyarrow.parquet as pq
        from deltalake import write_deltalake

        fs, _ = _fs.filesystem(self.location(kind))
        root = _fs.filesystem(self.location(kind))[1]
        paths = [f"{root}/{p.path}" for p in parts]
        schema = pq.read_schema(paths[0], filesystem=fs)

        def batches() -> Any:
            for path in paths:  # one file at a time: memory stays bounded
                with fs.open_input_file(path) as fh:
                    yield from pq.ParquetFile(fh).iter_batches()

        version = max(batch_id, dt.transaction_version(self.app_id) or -1)
        write_deltalake(
            dt,
            pa.RecordBatchReader.from_batches(schema, batches()),
            mode="append",
            schema_mode="merge",
            commit_properties=self._properties(batch_id, attempt, version, retries=0),
        )
        self.merged = True

    # -- keyed tables: changes -----------------------------------------------------

    def keys_location(self) -> str:
        """Where the key-state table of a keyed table goes: ``<location>__keys``, a Delta
        table beside the table (:func:`airflow_connectors.sinks.changes.state_schema`)."""
        return f"{self.location('rows')}{KEYS_SUFFIX}"

    def _publish_changes(self, batch_id: int, attempt: str) -> None:
        """Apply a keyed table's batch: under the table's publish lock, unless the batch
        is recorded already, collapse its staged changes per key, resolve them against
        the key-state table, commit the key states, then ONE MERGE into the table that
        records the batch as the connector's app transaction."""
        from deltalake.exceptions import CommitFailedError, DeltaError

        from airflow_connectors.sinks import changes as ch

        with ch.table_lock(self):
            for _ in range(MAX_CONFLICTS):
                try:
                    if self._apply_changes(batch_id, attempt):
                        break
                except (CommitFailedError, _PartsGone):
                    continue  # another writer committed meanwhile: read everything again
                except DeltaError as e:
                    raise SinkUnwritable(
                        f"table {self.table.name}: cannot merge batch {batch_id} into the "
                        f"Delta table at {self.location()}: {_why(e)}"
                    ) from e
                except OSError as e:
                    raise SinkUnwritable(
                        f"table {self.table.name}: cannot merge batch {batch_id} into the "
                        f"Delta table at {self.location()}: {_why(e)}; {REMEDY}"
                    ) from e
            else:
                raise SinkUnwritable(
                    f"table {self.table.name}: batch {batch_id} met {MAX_CONFLICTS} "
                    f"conflicting concurrent commits to {self.location()}; the next run "
                    "retries it"
                )
            failpoints.reach("delta_committed")
            # Still under the lock: a publisher racing this one (a re-run of the batch)
            # reads the staged files under it too, and finds them all or none.
            for kind in KINDS:  # MERGE wrote the rows anew: no staged file is listed
                self._drop_attempts(kind, batch_id, keep=None)

    def _apply_changes(self, batch_id: int, attempt: str) -> bool:
        """One try of :meth:`_publish_changes` (the lock held); True when done."""
        from airflow_connectors.sinks import changes as ch

        dt = self._open("rows")
        parts = self._parts("rows", batch_id, attempt)
        if dt is not None and self._recorded(dt, batch_id, attempt, parts):
            return True
        if dt is None:
            dt = self._create_empty("rows")
        self._check_schema(dt, "rows")
        self._declare_invariants(dt)
        staged = self._read_staged(parts)
        if staged is None or staged.num_rows == 0:
            return True  # nothing to apply (an empty batch still creates the table)
        new_columns = [c for c in self._new_columns(dt, parts) if c not in CHANGE_COLUMNS]
        collapsed = ch.collapse(staged, self.table, batch_id)
        del staged
        sdt = self._open_state()
        state = self._dataset(sdt, self.keys_location(), ch.state_schema(self.table))
        known = self._known(state, collapsed)
        now = int(time.time() * 1000)
        resolved = ch.resolve(
            collapsed, known, lambda keys: self._current(dt, keys), self.table, now_ms=now
        )
        history = self.table.scd_type == 2
        ended = self._truncate_seq(collapsed, batch_id) if history and resolved.truncate else None
        del collapsed, known
        wipe, truncated = self._truncation(state, resolved)
        self._commit_state(sdt, state, resolved, now)
        failpoints.reach("delta_keys_committed")
        if history:
            self._merge_history(
                dt, resolved, truncated, ended, bool(new_columns), batch_id, attempt
            )
        else:
            self._merge(dt, resolved, truncated, wipe, bool(new_columns), batch_id, attempt)
        self.merged = bool(new_columns)
        return True

    def _create_empty(self, kind: Kind) -> DeltaTable:
        """An empty Delta table at ``location(kind)`` (no app transaction: the batch is
        recorded by its MERGE), or the one another publisher created first."""
        from deltalake import DeltaTable, Schema

        uri = self.location(kind)
        return DeltaTable.create(
            uri,
            Schema.from_arrow(self.schema(kind)),
            mode="ignore",
            name=self.table.name,
            storage_options=storage_options(uri),
        )

    def _open_state(self) -> DeltaTable:
        """The key-state table, created empty when there is none yet."""
        from deltalake import DeltaTable, Schema
        from deltalake.exceptions import TableNotFoundError

        from airflow_connectors.sinks import changes as ch

        uri = self.keys_location()
        options = storage_options(uri)
        try:
            return DeltaTable(uri, storage_options=options)
        except TableNotFoundError:
            pass
        sdt = DeltaTable.create(
            uri,
            Schema.from_arrow(ch.state_schema(self.table)),
            mode="ignore",
            name=f"{self.table.name}{KEYS_SUFFIX}",
            storage_options=options,
        )
        self._declare_invariants(sdt)
        return sdt

    def _dataset(self, dt: DeltaTable, uri: str, schema: pa.Schema | None = None) -> Any:
        """The current version of a Delta table as a pyarrow dataset of its files (with
        ``schema``, else the table's: files written before a column was added read it
        as null)."""
        import pyarrow as pa
        import pyarrow.dataset as ds

        if dt.metadata().partition_columns or dt.protocol().reader_features:
            return dt.to_pyarrow_dataset()  # a table this sink did not write alone
        fs, _ = _fs.filesystem(uri)
        paths = [_path_in_filesystem(u) for u in dt.file_uris()]
        if schema is None:
            schema = pa.schema(dt.schema().to_arrow())
        return ds.dataset(paths, schema=schema, format="parquet", filesystem=fs)

    def _read_staged(self, parts: list[_Part]) -> pa.Table | None:
        """The attempt's staged changes (the table's columns and the change columns)."""
        import pyarrow.dataset as ds

        if not parts:
            return None
        fs, root = _fs.filesystem(self.location("rows"))
        paths = [f"{root}/{p.path}" for p in parts]
        return ds.dataset(paths, format="parquet", filesystem=fs).to_table()

    def _known(self, state: Any, collapsed: pa.Table) -> pa.Table:
        """The key-state rows of ``collapsed``'s keys and the floor row: a semi-join of
        the state table's files with the batch's keys (streamed, never one predicate
        naming every key)."""
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.dataset as ds

        keys = list(self.table.primary_key)
        wanted = collapsed.select(keys).filter(pc.is_valid(collapsed.column(keys[0])))
        parts = [state.to_table(filter=ds.field(keys[0]).is_null())]
        if wanted.num_rows:
            parts.append(state.join(ds.dataset(wanted), keys, join_type="left semi").to_table())
        return pa.concat_tables([p.cast(state.schema) for p in parts])

    def _current(self, dt: DeltaTable, keys: pa.Table) -> pa.Table:
        """The table's rows of ``keys`` now (for partial updates), in the table's schema
        (columns the Delta table lacks yet read as null)."""
        import pyarrow as pa
        import pyarrow.dataset as ds

        names = list(keys.column_names)
        table = self._dataset(dt, self.location())
        if self.table.scd_type == 2:  # the current rows: their history is not closed
            table = table.filter(ds.field(END_AT).is_null())
        rows = table.join(ds.dataset(keys), names, join_type="left semi").to_table()
        schema = self.table.arrow_schema()
        columns = {
            f.name: rows.column(f.name) if f.name in rows.column_names else pa.nulls(rows.num_rows)
            for f in schema
        }
        return pa.table(
            {n: c.cast(schema.field(n).type) for n, c in columns.items()},
        )

    def _truncation(self, state: Any, resolved: Any) -> tuple[bool, pa.Table | None]:
        """What the batch's truncate removes: ``(True, None)`` when every row the table
        holds goes (no key state newer than the truncate: the MERGE deletes the rows no
        change of the batch names), else ``(False, keys)``: the keys whose last change
        is older than the truncate (a later batch published first keeps its rows).
        ``(False, None)`` without a truncate."""
        import pyarrow.compute as pc

        from airflow_connectors.sinks import changes as ch

        if resolved.truncate is None:
            return False, None
        keys = list(self.table.primary_key)
        every = state.to_table(columns=[*keys, ch.BATCH, ORDER, ch.DELETED])
        every = every.filter(pc.is_valid(every.column(keys[0])))
        b, o = every.column(ch.BATCH), every.column(ORDER)
        mark_b, mark_o = resolved.truncate
        older = pc.or_(pc.less(b, mark_b), pc.and_(pc.equal(b, mark_b), pc.less(o, mark_o)))
        live_newer = pc.and_(pc.invert(older), pc.invert(every.column(ch.DELETED)))
        if self.table.scd_type != 2 and not pc.any(live_newer).as_py():
            return True, None
        # Tombstones too: a batch whose key states committed but whose MERGE a crash
        # stopped may still have the row in the table (deleting a missing row is a no-op).
        return False, every.filter(older).select(keys)

    def _commit_state(self, sdt: DeltaTable, state: Any, resolved: Any, now_ms: int) -> None:
        """Upsert the batch's key-state rows (one MERGE): a key's row is replaced, a new
        floor row replaces the old one, tombstones older than the table's
        ``tombstone_retention`` go."""
        import pyarrow.dataset as ds

        from airflow_connectors.sinks import changes as ch

        keys = list(self.table.primary_key)
        k0 = _quote(keys[0])
        cutoff = ch.tombstone_cutoff_ms(self.table, now_ms)
        drop = []
        if resolved.truncate is not None:
            drop.append(f"t.{k0} IS NULL")
        expired = (
            ds.field(ch.DELETED) & (ds.field(ch.CHANGED_MS) < cutoff) & ds.field(keys[0]).is_valid()
        )
        if state.count_rows(filter=expired):
            drop.append(
                f"(t.{_quote(ch.DELETED)} AND t.{_quote(ch.CHANGED_MS)} < {cutoff} "
                f"AND t.{k0} IS NOT NULL)"
            )
        if resolved.state.num_rows == 0 and not drop:
            return
        merger = sdt.merge(
            resolved.state,
            _key_predicate(keys),
            source_alias="s",
            target_alias="t",
            writer_properties=self._writer_properties(),
            commit_properties=_plain_commit(),
        )
        merger = merger.when_matched_update_all().when_not_matched_insert_all()
        if drop:
            merger = merger.when_not_matched_by_source_delete(" OR ".join(drop))
        merger.execute()

    def _merge(
        self,
        dt: DeltaTable,
        resolved: Any,
        truncated: pa.Table | None,
        wipe: bool,
        new_columns: bool,
        batch_id: int,
        attempt: str,
    ) -> None:
        """The batch's deletes and upserts (and truncate) in ONE Delta MERGE that records
        the batch as the connector's app transaction; a batch that changes nothing is
        recorded by an empty commit."""
        import pyarrow as pa
        import pyarrow.compute as pc

        source = self._merge_source(resolved, truncated)
        version = max(batch_id, dt.transaction_version(self.app_id) or -1)
        properties = self._properties(batch_id, attempt, version, retries=0)
        before = dt.version()
        if source.num_rows or wipe:
            flag = _quote(DELETE_FLAG)
            merger = dt.merge(
                source,
                _key_predicate(list(self.table.primary_key)),
                source_alias="s",
                target_alias="t",
                merge_schema=new_columns,
                writer_properties=self._writer_properties(),
                streamed_exec=False,  # source statistics prune the table's files
                commit_properties=properties,
            )
            merger = merger.when_matched_delete(f"s.{flag}")
            if pc.any(pc.invert(source.column(DELETE_FLAG))).as_py():
                merger = merger.when_matched_update_all(
                    f"NOT s.{flag}", except_cols=[DELETE_FLAG]
                ).when_not_matched_insert_all(f"NOT s.{flag}", except_cols=[DELETE_FLAG])
            if wipe:
                merger = merger.when_not_matched_by_source_delete()
            merger.execute()
        after = self._open("rows") or dt
        if after.version() == before:
            # A batch that changes nothing (all stale, or a MERGE with nothing to do)
            # makes no commit of its own: record it with an empty one.
            after.create_write_transaction(
                [], "append", pa.schema(after.schema().to_arrow()), commit_properties=properties
            )

    def _truncate_seq(self, collapsed: pa.Table, batch_id: int) -> Any:
        """The sequence value of the batch's truncate (what ``scd_type: 2`` closes the
        rows it removes at); one line when the truncate record has none."""
        import pyarrow.compute as pc

        from airflow_connectors.changes import OP, TRUNCATE
        from airflow_connectors.sinks import changes as ch

        rows = collapsed.filter(pc.equal(collapsed.column(OP), TRUNCATE))
        value = rows.column(ch.SEQ)[0].as_py() if rows.num_rows else None
        if value is None:
            raise SinkUnwritable(
                f"table {self.table.name}: the truncate in batch {batch_id} has no "
                f"{self.table.sequence_by} value, which scd_type 2 closes the truncated "
                f"rows' history at ({END_AT}); give truncate records a "
                f"{self.table.sequence_by}, or use scd_type 1"
            )
        return value

    def _merge_history(
        self,
        dt: DeltaTable,
        resolved: Any,
        truncated: pa.Table | None,
        ended: Any,
        new_columns: bool,
        batch_id: int,
        attempt: str,
    ) -> None:
        """``scd_type: 2``: ONE MERGE that closes the current row of every key the batch
        changes (:data:`END_AT` = the change's sequence value; a delete and a truncate
        only close) and inserts each upsert as the key's new current row
        (:data:`START_AT` = its sequence value, :data:`END_AT` null), recording the
        batch as the connector's app transaction."""
        import pyarrow as pa

        keys = list(self.table.primary_key)
        source = self._history_source(resolved, truncated, ended)
        version = max(batch_id, dt.transaction_version(self.app_id) or -1)
        properties = self._properties(batch_id, attempt, version, retries=0)
        before = dt.version()
        if source.num_rows:
            matched = [f"t.{_quote(k)} = s.{_quote(_MERGE_KEY + k)}" for k in keys]
            merger = dt.merge(
                source,
                " AND ".join([*matched, f"t.{_quote(END_AT)} IS NULL"]),
                source_alias="s",
                target_alias="t",
                merge_schema=new_columns,
                writer_properties=self._writer_properties(),
                streamed_exec=False,
                commit_properties=properties,
            )
            hidden = [*(_MERGE_KEY + k for k in keys), OPEN_FLAG]
            merger.when_matched_update({END_AT: f"s.{_quote(END_AT)}"}).when_not_matched_insert_all(
                f"s.{_quote(OPEN_FLAG)}", except_cols=hidden
            ).execute()
        after = self._open("rows") or dt
        if after.version() == before:
            after.create_write_transaction(
                [], "append", pa.schema(after.schema().to_arrow()), commit_properties=properties
            )

    def _history_source(self, resolved: Any, truncated: pa.Table | None, ended: Any) -> pa.Table:
        """The history MERGE's source: each upsert as a new row (:data:`OPEN_FLAG`, no
        merge key), then one closing row per changed key (its key as the merge key,
        :data:`END_AT` the closing sequence value)."""
        import pyarrow as pa

        from airflow_connectors.sinks import changes as ch

        keys = list(self.table.primary_key)
        up = resolved.upserts
        seq_type = ch.state_schema(self.table).field(ch.SEQ).type
        closing = [up.select([*keys, ch.SEQ]), resolved.deletes.select([*keys, ch.SEQ])]
        if truncated is not None and truncated.num_rows:
            named = pa.concat_tables([c.select(keys) for c in closing])
            gone = truncated.join(named, keys, join_type="left anti", use_threads=False)
            gone = gone.select(keys).cast(named.schema)
            seq = pa.array([ended] * gone.num_rows, seq_type)
            closing.append(gone.append_column(ch.SEQ, seq))
        close = pa.concat_tables([c.cast(closing[0].schema) for c in closing])
        n_open, n_close = up.num_rows, close.num_rows
        table_fields = list(self.table.arrow_schema())
        fields = [
            *table_fields,
            pa.field(START_AT, seq_type),
            pa.field(END_AT, seq_type),
            *(pa.field(_MERGE_KEY + k, self.table.arrow_schema().field(k).type) for k in keys),
            pa.field(OPEN_FLAG, pa.bool_(), nullable=False),
        ]

        def column(f: pa.Field, opened: Any, closed: Any) -> pa.ChunkedArray:
            def part(values: Any, n: int) -> list[pa.Array]:
                if values is None:
                    filler = pa.nulls(n, f.type) if f.nullable else _zeros(f.type, n)
                    return [filler]
                return list(values.cast(f.type).chunks)

            return pa.chunked_array(part(opened, n_open) + part(closed, n_close), f.type)

        columns = [
            column(f, up.column(f.name), close.column(f.name) if f.name in keys else None)
            for f in table_fields
        ]
        columns.append(column(fields[len(table_fields)], up.column(ch.SEQ), None))
        columns.append(column(fields[len(table_fields) + 1], None, close.column(ch.SEQ)))
        columns += [
            column(pa.field(_MERGE_KEY + k, close.schema.field(k).type), None, close.column(k))
            for k in keys
        ]
        flags = pa.array([True] * n_open + [False] * n_close, pa.bool_())
        columns.append(pa.chunked_array([flags]))
        return pa.Table.from_arrays(columns, schema=pa.schema(fields))

    def _merge_source(self, resolved: Any, truncated: pa.Table | None) -> pa.Table:
        """The MERGE's source: the upserts, then the deleted keys, with the flag
        :data:`DELETE_FLAG`. Its columns keep the table's nullability (a schema-merging
        MERGE takes the source's), so a deleted key's NOT NULL columns hold zeros that
        are never written."""
        import pyarrow as pa

        keys = list(self.table.primary_key)
        schema = pa.schema([*self.schema("rows"), pa.field(DELETE_FLAG, pa.bool_(), False)])
        deletes = resolved.deletes.select(keys)
        if truncated is not None and truncated.num_rows:
            named = pa.concat_tables(
                [resolved.upserts.select(keys), deletes.cast(resolved.upserts.select(keys).schema)]
            )
            gone = truncated.join(named, keys, join_type="left anti", use_threads=False)
            deletes = pa.concat_tables([deletes, gone.select(keys).cast(deletes.schema)])
        n_up, n_del = resolved.upserts.num_rows, deletes.num_rows
        columns = []
        for f in schema:
            if f.name == DELETE_FLAG:
                flags = pa.array([False] * n_up + [True] * n_del, pa.bool_())
                columns.append(pa.chunked_array([flags]))
                continue
            up = resolved.upserts.column(f.name).cast(f.type)
            if f.name in keys:
                down = deletes.column(f.name).cast(f.type)
            else:
                filler = pa.nulls(n_del, f.type) if f.nullable else _zeros(f.type, n_del)
                down = pa.chunked_array([filler], f.type)
            columns.append(pa.chunked_array(up.chunks + down.chunks, f.type))
        return pa.Table.from_arrays(columns, schema=schema)

    def _writer_properties(self) -> Any:
        from deltalake import WriterProperties

        codec = self.config.compression.upper()
        return WriterProperties(compression="UNCOMPRESSED" if codec == "NONE" else codec)  # type: ignore[arg-type]

    # -- discard -------------------------------------------------------------------

    def _drop_attempts(self, kind: Kind, batch_id: int, keep: str | None) -> None:
        """Remove the batch's attempt folders but ``keep`` (None: but the files the
        table's log lists)."""
        import pyarrow.fs as pafs

        fs, folder = _fs.filesystem(self._attempt_dir(kind, batch_id))
        try:
            infos = fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
        except OSError:
            return
        infos = [i for i in infos if i.type == pafs.FileType.Directory and i.base_name != keep]
        listed: set[str] = set()
        if infos:  # never a folder the log lists (an older batch of this id: a new store)
            dt = self._open(kind)
            if dt is not None:
                listed = {str(p) for p in dt.get_add_actions().column("path").to_pylist()}
        prefix = f"batch-{batch_id:010d}/"
        for info in infos:
            if any(p.startswith(f"{prefix}{info.base_name}/") for p in listed):
                continue  # committed: never removed
            with contextlib.suppress(OSError):
                fs.delete_dir(info.path)
        with contextlib.suppress(OSError):
            if not fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True)):
                fs.delete_dir(folder)

    def discard(self, batch_id: int, attempt: str | None = None) -> None:
        """Removes the attempt's files (every attempt's but committed ones when
        ``attempt`` is None); never a file the Delta log lists."""
        import pyarrow.fs as pafs

        if attempt is None:
            for kind in KINDS:
                self._drop_attempts(kind, batch_id, keep=None)
            return
        for kind in KINDS:
            fs, folder = _fs.filesystem(self._attempt_dir(kind, batch_id, attempt))
            with contextlib.suppress(OSError):
                if fs.get_file_info(folder).type == pafs.FileType.Directory:
                    fs.delete_dir(folder)
            with contextlib.suppress(OSError):
                parent = _fs.filesystem(self._attempt_dir(kind, batch_id))
                if not parent[0].get_file_info(pafs.FileSelector(parent[1], allow_not_found=True)):
                    parent[0].delete_dir(parent[1])


def _quote(name: str) -> str:
    """A column name as delta-rs SQL predicates take it."""
    return '"' + name.replace('"', '""') + '"'


def _key_predicate(keys: list[str]) -> str:
    """The MERGE condition of a keyed table: the key columns of target and source equal."""
    return " AND ".join(f"t.{_quote(k)} = s.{_quote(k)}" for k in keys)


def _plain_commit() -> Any:
    """Commit properties of the key-state table's MERGE (no app transaction: the batch
    is recorded by the table's own commit), without delta-rs's retry (the caller reads
    everything again after a conflict)."""
    from deltalake import CommitProperties

    return CommitProperties(max_commit_retries=0)


def _zeros(typ: pa.DataType, n: int) -> pa.Array:
    """``n`` zero values of ``typ`` (0, "", false, the epoch, empty lists, structs of
    zeros): what a deleted key's NOT NULL columns hold in a MERGE source."""
    import pyarrow as pa

    if pa.types.is_struct(typ):
        fields = [typ.field(i) for i in range(typ.num_fields)]
        return pa.StructArray.from_arrays([_zeros(f.type, n) for f in fields], fields=fields)
    if pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_map(typ):
        return pa.array([[]] * n, typ)
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return pa.array([""] * n, typ)
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        return pa.array([b""] * n, typ)
    if pa.types.is_boolean(typ):
        return pa.array([False] * n, typ)
    if pa.types.is_date32(typ):
        return pa.array([0] * n, pa.int32()).cast(typ)
    return pa.array([0] * n, pa.int64()).cast(typ)


def _one(field: pa.Field) -> pa.Schema:
    import pyarrow as pa

    return pa.schema([field])


def _stats(meta: Any) -> str:
    """Delta file statistics from a Parquet footer: the row count, null counts, and
    min/max of integer, date and string columns (exact values, so readers may skip files
    by them safely)."""
    import pyarrow as pa

    schema = meta.schema.to_arrow_schema()
    nulls: dict[str, int] = {}
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    for i, field in enumerate(schema):
        typ = field.type
        ranged = pa.types.is_integer(typ) or pa.types.is_date32(typ) or pa.types.is_string(typ)
        count: int | None = 0
        lo: Any = None
        hi: Any = None
        for g in range(meta.num_row_groups):
            st = meta.row_group(g).column(i).statistics
            if st is None or not st.has_null_count:
                count, ranged = None, False
                break
            count = (count or 0) + st.null_count
            if not ranged:
                continue
            if not st.has_min_max:
                if meta.row_group(g).num_rows > st.null_count:
                    ranged = False
                continue
            lo = st.min if lo is None else min(lo, st.min)
            hi = st.max if hi is None else max(hi, st.max)
        if count is not None:
            nulls[field.name] = count
        if ranged and lo is not None:
            mins[field.name] = lo.isoformat() if hasattr(lo, "isoformat") else lo
            maxs[field.name] = hi.isoformat() if hasattr(hi, "isoformat") else hi
    return json.dumps(
        {"numRecords": meta.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls},
        default=str,
    )


def _path_in_filesystem(uri: str) -> str:
    """A data file's URI from the Delta log as a path in the table's pyarrow filesystem
    (``bucket/key`` on S3, an absolute path locally)."""
    from urllib.parse import unquote, urlsplit

    parts = urlsplit(uri)
    if parts.scheme in ("s3", "s3a", "gs"):
        return f"{parts.netloc}{unquote(parts.path)}"
    if parts.scheme in _fs.AZURE_SCHEMES:  # container/path (abfs: container@account)
        return f"{parts.netloc.split('@')[0]}{unquote(parts.path)}"
    if parts.scheme == "file":
        return unquote(parts.path)
    return uri
