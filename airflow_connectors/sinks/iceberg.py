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
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from airflow_connectors import failpoints
from airflow_connectors.sinks import _fs
from airflow_connectors.sinks.base import KINDS, Kind, PartWriter, Sink, SinkConfig, SinkUnwritable
from airflow_connectors.sinks.parts import ParquetPart, blocker

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table

#: Snapshot summary properties that mark the batch a commit appended.
BATCH_PROPERTY = "airflow-connectors.batch"
ATTEMPT_PROPERTY = "airflow-connectors.attempt"
#: Concurrent commits (another publisher of the table) are retried this many times.
COMMIT_TRIES = 20


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
        """The Arrow schema of the table's Parquet parts (rows or dead letters)."""
        return file_schema(super().schema(kind))

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
        from pyiceberg.exceptions import NoSuchTableError

        namespace, name = self.identifier(kind)
        try:
            # Loaded first: pyiceberg's create writes a metadata file before it finds the
            # table exists, which would leave an orphan file per batch.
            return catalog.load_table((namespace, name))
        except NoSuchTableError:
            pass
        catalog.create_namespace_if_not_exists(namespace)
        return catalog.create_table_if_not_exists(
            (namespace, name),
            schema=self.schema(kind),
            location=self.location(kind),
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
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        uri = self.catalog_uri()
        try:
            with self.catalog() as catalog:
                try:
                    table = catalog.load_table(self.identifier(kind))
                except (NoSuchTableError, NoSuchNamespaceError):
                    return None
                return table.scan().to_arrow()
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
        ``data`` folder."""
        return ParquetPart(
            self._attempt_folder(batch_id, attempt, kind),
            lambda n: f"part-{part:05d}-{n:03d}.parquet",
            compression=self.config.compression,
            target=self.config.target_file_size,
            schema=self.schema(kind),
        )

    def publish(self, batch_id: int, attempt: str) -> None:
        """Appends the attempt's parts to the table (then to its dead-letter table) in one
        Iceberg commit each, unless a snapshot already carries this batch; then removes
        the batch's other attempts."""
        with self.catalog() as catalog:
            for kind in KINDS:
                parts = self.parts(batch_id, attempt, kind)
                if parts:
                    self._guard(
                        lambda k=kind, p=parts: self._append(catalog, k, batch_id, attempt, p),
                        kind,
                        "commit to",
                    )
        failpoints.reach("iceberg_committed")
        for kind in KINDS:
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
