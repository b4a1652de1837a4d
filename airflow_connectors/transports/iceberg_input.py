"""``iceberg_input``: an Apache Iceberg table of a SQL catalog (pyiceberg's ``SqlCatalog``
on SQLite or PostgreSQL; data local or on ``s3://``) as a source, shaped as Feldera's
``iceberg_input``. Integrated: ``read`` yields record batches in the table's columns.

Work items are data files. ``snapshot`` plans a scan of one snapshot (each data file
with the delete files that apply to it at that snapshot, pruned by ``filter``);
``follow`` takes each snapshot committed after the start as new work: the data files it
added, read as of that snapshot. Keys are ``<sequence number, 20 digits>/<file path>``:
snapshot ids are random, sequence numbers grow with every commit, so keys sort in
commit order. ``start``/``end`` count records of the file as read (after deletes and the
filter), so a file committed part way resumes after its last committed record.

A snapshot with nothing to read (a compaction, a skipped delete, an append the filter
prunes, ``follow``'s start) gets a marker item ``<sequence number>`` of no rows, so its
commit records that the snapshot was dealt with. The start snapshot is fixed at the
first discovery: its first key is kept in the offsets (no ``mtime``, so it never
collapses), and later discoveries find the start from the lowest known key. Every other
key below the watermark is committed (sequence numbers only grow: no key can appear
below it later), so offsets rows collapse once the watermark passes them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator, model_validator

from airflow_connectors.connections.aws import AwsSettings
from airflow_connectors.spec.config import StrictConfig
from airflow_connectors.spec.datasets import LineageDataset, storage_dataset
from airflow_connectors.transports.base import MTIME, Cursor, Limits, Transport, WorkItem

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.table import FileScanTask, Table
    from pyiceberg.table.snapshots import Snapshot

    from airflow_connectors.spec.models import TableSpec

#: Digits of the sequence number in a key (a signed 64-bit number fits).
SEQ_DIGITS = 20

#: ``meta`` of the start snapshot's first key: the start's last key.
LAST_KEY = "last_key"

Mode = Literal["snapshot", "follow", "snapshot_and_follow"]


class IcebergInputConfig(StrictConfig):
    """Which Iceberg table, in which SQL catalog, and what of it to read."""

    table_name: str = Field(
        pattern=r"^[^.\s]+(\.[^.\s]+)+$",
        description="The table as '<namespace>.<table>' (nested namespaces: 'a.b.table').",
    )
    catalog_uri: str = Field(
        min_length=1,
        description="SQLAlchemy URL of the database holding the Iceberg SQL catalog: "
        "sqlite:///path/catalog.db or postgresql+psycopg://user:password@host/db. A "
        "password in it is masked wherever it is shown.",
    )
    catalog_name: str = Field(
        default="airflow_connectors",
        min_length=1,
        description="Name of the catalog inside that database (pyiceberg's SqlCatalog "
        "name; the iceberg sink's default is 'airflow_connectors').",
    )
    catalog_properties: dict[str, str] = Field(
        default_factory=dict,
        description="More pyiceberg catalog and FileIO properties, e.g. 's3.endpoint', "
        "'s3.region', 's3.access-key-id', 's3.secret-access-key'. Unset S3 ones come from "
        "the AWS environment (AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, AWS_REGION, "
        "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN).",
    )
    mode: Mode = Field(
        default="snapshot",
        description="'snapshot': read one snapshot of the table, then end of input. "
        "'follow': read the rows of each snapshot committed after the start snapshot. "
        "'snapshot_and_follow': the start snapshot, then follow.",
    )
    snapshot_id: int | None = Field(
        default=None,
        description="The start snapshot (read in 'snapshot' modes, followed after in "
        "'follow'). Unset: the snapshot as of 'datetime', else the table's current "
        "snapshot at the connector's first discovery.",
    )
    datetime: str | None = Field(
        default=None,
        description="Start at the snapshot that was current at this time (ISO 8601, e.g. "
        "'2026-11-24T12:00:00+00:00'; no zone: UTC). Exclusive with snapshot_id.",
    )
    end_snapshot_id: int | None = Field(
        default=None,
        description="Follow modes: end of input once this snapshot is read (inclusive). "
        "Unset: follow forever.",
    )
    filter: str | None = Field(
        default=None,
        description="pyiceberg row filter: only rows matching it are read, e.g. "
        "\"region = 'eu' and amount > 10\". Files whose statistics rule it out are "
        "skipped without being read.",
    )
    case_sensitive: bool = Field(
        default=True,
        description="Whether column names in 'filter' and the table's columns match the "
        "Iceberg schema case-sensitively.",
    )
    on_delete: Literal["fail", "skip"] = Field(
        default="fail",
        description="Follow modes, a 'delete' snapshot (rows removed): 'fail' stops the "
        "connector naming the snapshot; 'skip' reads on past it (rows already ingested "
        "stay in the target table).",
    )
    on_overwrite: Literal["fail", "skip", "read_added"] = Field(
        default="fail",
        description="Follow modes, an 'overwrite' snapshot (rows removed and added): "
        "'fail' stops naming the snapshot; 'skip' reads on past it without its rows; "
        "'read_added' reads the data files it added (a copy-on-write rewrite adds the "
        "rows it kept again).",
    )

    @field_validator("datetime")
    @classmethod
    def _iso_datetime(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                dt.datetime.fromisoformat(v)
            except ValueError:
                raise ValueError(
                    f"expected an ISO 8601 date and time such as '2026-11-24T12:00:00+00:00', "
                    f"got {v!r}"
                ) from None
        return v

    @field_validator("filter")
    @classmethod
    def _row_filter(cls, v: str | None) -> str | None:
        if v is not None:
            from pyiceberg.expressions.parser import parse

            try:
                parse(v)
            except Exception as e:
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise ValueError(
                    f"not a pyiceberg row filter ({first[:160]}); write e.g. "
                    "\"id > 10 and name = 'a'\""
                ) from None
        return v

    @model_validator(mode="after")
    def _consistent(self) -> IcebergInputConfig:
        if self.snapshot_id is not None and self.datetime is not None:
            raise ValueError("set snapshot_id or datetime, not both")
        if self.end_snapshot_id is not None and self.mode == "snapshot":
            raise ValueError(
                "end_snapshot_id is for the follow modes; mode 'snapshot' ends after its snapshot"
            )
        return self

    def start_millis(self) -> int | None:
        """``datetime`` as epoch milliseconds (no zone: UTC)."""
        if self.datetime is None:
            return None
        when = dt.datetime.fromisoformat(self.datetime)
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        return int(when.timestamp() * 1000)


def seq_key(seq: int, path: str | None = None) -> str:
    """The key of a data file read at (or added by) the snapshot of sequence number
    ``seq``; without ``path`` the snapshot's marker."""
    head = f"{seq:0{SEQ_DIGITS}d}"
    return head if path is None else f"{head}/{path}"


def key_seq(key: str) -> int:
    """The sequence number a key starts with."""
    return int(key[:SEQ_DIGITS])


@dataclass(frozen=True)
class _Unit:
    """What one snapshot contributes: its files (all live ones, or those it added) or,
    when there is nothing to read, a marker."""

    seq: int
    snapshot: Snapshot | None
    #: The start snapshot: its first key keeps the start in the offsets.
    start: bool
    #: Only the data files the snapshot added (follow), not all live ones (snapshot).
    added_only: bool
    #: Why it has nothing to read ("start" of follow, "replace", "skipped delete").
    marker: str | None = None
    #: Reported (as a transport error) when its marker is listed as new work.
    notice: str | None = None


class IcebergInputTransport(Transport):
    """Reads an Iceberg table of a SQL catalog by scan planning (``snapshot``) and by
    following its snapshots (``follow``); see the module docstring for keys and offsets."""

    name = "iceberg_input"
    Config = IcebergInputConfig
    config: IcebergInputConfig
    needs_format = False

    def __init__(self, config: StrictConfig, table: TableSpec) -> None:
        if not isinstance(config, IcebergInputConfig):
            raise TypeError(f"iceberg_input needs an IcebergInputConfig, got {type(config)}")
        super().__init__(config, table)
        self._loaded: Table | None = None

    @property
    def bounded(self) -> bool:
        """Snapshot mode ends after its snapshot; the follow modes at end_snapshot_id."""
        return self.config.mode == "snapshot" or self.config.end_snapshot_id is not None

    def describe(self) -> str:
        """Table, mode and start on one line."""
        c = self.config
        parts = [f"iceberg_input: {c.table_name}", c.mode]
        if c.snapshot_id is not None:
            parts.append(f"from snapshot {c.snapshot_id}")
        elif c.datetime is not None:
            parts.append(f"from {c.datetime}")
        if c.end_snapshot_id is not None:
            parts.append(f"until snapshot {c.end_snapshot_id}")
        if c.filter:
            parts.append(f"filter {c.filter}")
        return ", ".join(parts)

    def lineage_datasets(self) -> list[LineageDataset]:
        """The table's storage location, read from its catalog; the table as its
        catalog names it (in ``iceberg://<catalog>``) when the catalog cannot be read."""
        c = self.config
        try:
            location = str(self.load(fresh=False).location())
        except Exception:  # lineage is a nicety: a catalog down now names the table still
            logging.getLogger(__name__).warning(
                "lineage: cannot read the location of Iceberg table %s", c.table_name
            )
            return [LineageDataset(f"iceberg://{c.catalog_name}", c.table_name)]
        return [storage_dataset(location)]

    # --- the catalog ------------------------------------------------------------------

    def _where(self) -> str:
        return f"iceberg_input: table {self.config.table_name}"

    def _mask(self, text: str) -> str:
        from airflow_connectors.spec.redact import mask_text, mask_url, secret_values

        c = self.config
        secrets = [
            *secret_values({"catalog_uri": c.catalog_uri, **c.catalog_properties}),
            *AwsSettings.from_environment().secrets(),
        ]
        return mask_url(mask_text(text, secrets))

    def _properties(self) -> dict[str, str]:
        props = AwsSettings.from_environment().iceberg_properties()
        props.update(self.config.catalog_properties)
        props["uri"] = self.config.catalog_uri
        # A reader creates nothing: a wrong URL must not leave catalog tables behind.
        props.setdefault("init_catalog_tables", "false")
        return props

    def load(self, *, fresh: bool = True) -> Table:
        """The Iceberg table (its metadata now; ``fresh=False``: the one loaded before,
        when there is one). Raises OSError in one line naming the table, without secrets."""
        if self._loaded is not None and not fresh:
            return self._loaded
        from pyiceberg.catalog.sql import SqlCatalog
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        c = self.config
        catalog = None
        try:
            catalog = SqlCatalog(c.catalog_name, **self._properties())
            table = catalog.load_table(c.table_name)
        except (NoSuchTableError, NoSuchNamespaceError):
            raise OSError(
                f"{self._where()} is not in the Iceberg SQL catalog {c.catalog_name!r} at "
                f"{self._mask(c.catalog_uri)}; check table_name ('<namespace>.<table>'), "
                "catalog_name and catalog_uri"
            ) from None
        except Exception as e:
            raise OSError(
                f"{self._where()}: cannot open the Iceberg SQL catalog {c.catalog_name!r} at "
                f"{self._mask(c.catalog_uri)}: {self._mask(_first_line(e))}; check catalog_uri "
                "and that the database is reachable"
            ) from None
        finally:
            if catalog is not None:
                catalog.engine.dispose()
        if table.metadata.format_version < 2:
            raise OSError(
                f"{self._where()} has format version 1, whose snapshots have no sequence "
                "numbers to order them by; upgrade it to format version 2 (Spark: ALTER TABLE "
                "... SET TBLPROPERTIES ('format-version'='2'))"
            )
        self._loaded = table
        return table

    # --- discovery --------------------------------------------------------------------

    def discover(self, cursor: Cursor, limits: Limits) -> Iterator[WorkItem]:
        """The data files (and markers) not yet committed, in key order; see the module
        docstring. Raises OSError (one line) when the table cannot be read or a snapshot
        of a kind the config refuses comes next."""
        listed_at = time.time()
        table = self.load()
        units, refused = self._units(table, cursor)
        budget = limits.max_records
        count = 0
        for unit in units:
            for item in self._unit_items(table, unit, cursor):
                yield item
                count += 1
                if budget is not None:
                    budget -= item.records or 0
                if count >= limits.max_items or (budget is not None and budget <= 0):
                    return
        if refused is not None:
            if count:  # what comes before the refused snapshot is read first
                return
            raise refused
        # Everything up to the watermark is committed (sequence numbers only grow), so
        # the offsets rows below it may collapse.
        self.relisted_at = listed_at

    def _known(self, cursor: Cursor) -> list[str]:
        keys = [*cursor.offsets, *cursor.in_flight]
        if cursor.watermark is not None:
            keys.append(cursor.watermark)
        return keys

    def _start(self, table: Table, cursor: Cursor) -> tuple[int, Snapshot | None]:
        """The start snapshot's sequence number and snapshot (None: before the first
        snapshot, or expired)."""
        known = self._known(cursor)
        meta = table.metadata
        if known:
            seq = key_seq(min(known))
            found = [s for s in meta.snapshots if s.sequence_number == seq]
            return seq, found[0] if found else None
        c = self.config
        snapshot: Snapshot | None
        if c.snapshot_id is not None:
            snapshot = meta.snapshot_by_id(c.snapshot_id)
            if snapshot is None:
                raise OSError(
                    f"{self._where()} has no snapshot {c.snapshot_id} (snapshot_id); its "
                    f"snapshots: {_some_ids(table)}"
                )
        elif (millis := c.start_millis()) is not None:
            snapshot = table.snapshot_as_of_timestamp(millis)
            if snapshot is None:
                raise OSError(
                    f"{self._where()} has no snapshot at or before {c.datetime} (datetime)"
                )
        else:
            snapshot = table.current_snapshot()
        if snapshot is None:
            return 0, None
        return _seq(snapshot), snapshot

    def _units(self, table: Table, cursor: Cursor) -> tuple[list[_Unit], OSError | None]:
        """The start snapshot and, in the follow modes, every later one up to the
        current (or ``end_snapshot_id``), skipping those wholly below the watermark; the
        units stop before a snapshot the config refuses, returned as the error."""
        mode = self.config.mode
        start_seq, start = self._start(table, cursor)
        floor = key_seq(cursor.watermark) if cursor.watermark is not None else -1
        units: list[_Unit] = []
        if start is None and start_seq > 0 and mode != "follow":
            if not _start_read(cursor):
                raise OSError(
                    f"{self._where()}: the snapshot of sequence number {start_seq} this "
                    "connector started reading was expired before it was read completely; "
                    "reset the connector's offsets to read the table again"
                )
        elif start_seq >= floor:
            reads = mode != "follow" and start is not None
            units.append(_Unit(start_seq, start, True, False, None if reads else "start"))
        if mode != "snapshot":
            for snapshot in self._after(table, cursor, start_seq, floor):
                try:
                    units.append(self._follow_unit(snapshot))
                except OSError as e:
                    return units, e
        return units, None

    def _after(self, table: Table, cursor: Cursor, start_seq: int, floor: int) -> list[Snapshot]:
        """Snapshots of the table's main line after the start (and not below the
        watermark's), oldest first, up to ``end_snapshot_id``. Raises OSError when
        snapshots in between were expired before they were read."""
        meta = table.metadata
        head = meta.current_snapshot()
        end_id = self.config.end_snapshot_id
        if end_id is not None:
            end = meta.snapshot_by_id(end_id)
            if end is not None:
                if _seq(end) < start_seq:
                    raise OSError(
                        f"{self._where()}: end_snapshot_id {end_id} is older than the start "
                        f"snapshot (sequence number {_seq(end)} < {start_seq})"
                    )
                head = end
        lowest = max(start_seq + 1, floor)
        found: list[Snapshot] = []
        snapshot = head
        while snapshot is not None and _seq(snapshot) >= lowest:
            found.append(snapshot)
            parent = snapshot.parent_snapshot_id
            snapshot = None if parent is None else meta.snapshot_by_id(parent)
        if found and snapshot is None and self._gap(found[-1], cursor, max(start_seq, floor)):
            oldest = found[-1]
            raise OSError(
                f"{self._where()}: snapshots before snapshot {oldest.snapshot_id} (sequence "
                f"number {_seq(oldest)}) were expired before this connector read them (it read "
                f"up to sequence number {max(start_seq, floor)}); their rows may be lost. "
                "Reset the connector's offsets (or start it again with mode "
                "snapshot_and_follow) to read the table again"
            )
        found.reverse()
        return found

    def _gap(self, oldest: Snapshot, cursor: Cursor, read_seq: int) -> bool:
        """Whether unread snapshots were expired below ``oldest``, the oldest snapshot of
        the main line after ``read_seq``: its parent is gone and was not read, or (pyiceberg
        clears the parent of a snapshot whose parent it expires) its sequence number does
        not follow ``read_seq``. Sequence numbers of the main line follow each other unless
        branches took some: a table with expired branch snapshots may be refused here."""
        parent = oldest.parent_snapshot_id
        if parent is not None:
            return not self._read_before(parent, cursor)
        return read_seq >= 0 and _seq(oldest) > read_seq + 1

    @staticmethod
    def _read_before(snapshot_id: int, cursor: Cursor) -> bool:
        """Whether a committed key (the watermark's or the start's row) was read at this
        snapshot: an expired parent that was read is no gap."""
        return any(o.meta.get("snapshot_id") == snapshot_id for o in cursor.offsets.values())

    def _follow_unit(self, snapshot: Snapshot) -> _Unit:
        """What a snapshot after the start contributes, by its operation."""
        c = self.config
        seq = _seq(snapshot)
        op = snapshot.summary.operation.value if snapshot.summary is not None else "append"
        if op == "append" or (op == "overwrite" and c.on_overwrite == "read_added"):
            return _Unit(seq, snapshot, False, True)
        if op == "replace":  # compaction: the same rows in other files
            return _Unit(seq, snapshot, False, True, "replace")
        policy = c.on_delete if op == "delete" else c.on_overwrite
        if policy == "skip":
            notice = (
                f"{self._where()}: skipped snapshot {snapshot.snapshot_id} (sequence number "
                f"{seq}, operation {op}) as on_{op} says; rows it removed stay in the target "
                "table"
            )
            return _Unit(seq, snapshot, False, True, f"skipped {op}", notice)
        options = "'skip'" if op == "delete" else "'skip' or 'read_added'"
        raise OSError(
            f"{self._where()}: snapshot {snapshot.snapshot_id} (sequence number {seq}, "
            f"operation '{op}') removes rows, which follow mode cannot apply to the target table; "
            f"set on_{op}: {options} to read on past it, or end following before it with "
            f"end_snapshot_id {snapshot.parent_snapshot_id}"
        )

    def _unit_items(self, table: Table, unit: _Unit, cursor: Cursor) -> Iterator[WorkItem]:
        """The unit's work items after ``cursor``, in key order."""
        sid = unit.snapshot.snapshot_id if unit.snapshot is not None else None
        stamp = {} if unit.snapshot is None else {MTIME: unit.snapshot.timestamp_ms / 1000}
        items: list[WorkItem] = []
        if unit.marker is None and unit.snapshot is not None:
            for task, manifest in sorted(
                self.tasks(table, unit.snapshot, added_only=unit.added_only),
                key=lambda t: t[0].file.file_path,
            ):
                items.append(
                    WorkItem(
                        key=seq_key(unit.seq, task.file.file_path),
                        size=task.file.file_size_in_bytes,
                        records=task.file.record_count,
                        meta={
                            "snapshot_id": sid,
                            "file": task.file.file_path,
                            "manifest": manifest,
                            **stamp,
                        },
                    )
                )
        if not items:  # nothing to read: a marker records that the snapshot was dealt with
            items.append(
                WorkItem(key=seq_key(unit.seq), records=0, meta={"snapshot_id": sid, **stamp})
            )
        if unit.start:
            # No mtime: the start's first key never collapses (it fixes the start). It
            # names the start's last key: once the watermark passes that, the start
            # snapshot is read even when it has been expired since.
            head = items[0]
            meta = {k: v for k, v in head.meta.items() if k != MTIME}
            items[0] = dataclasses.replace(head, meta={**meta, LAST_KEY: items[-1].key})
        for item in items:
            resumed = _after_cursor(item, cursor)
            if resumed is not None:
                if unit.notice is not None:
                    self.notices.append((unit.notice, item.key))
                yield resumed

    def tasks(
        self, table: Table, snapshot: Snapshot, *, added_only: bool
    ) -> Iterator[tuple[FileScanTask, str]]:
        """The scan tasks of ``snapshot`` (each data file with the delete files that
        apply to it there), pruned by ``filter``, with the manifest each data file is
        listed in; ``added_only``: only the data files the snapshot added."""
        from pyiceberg.manifest import DataFileContent, ManifestContent, ManifestEntryStatus

        sid = snapshot.snapshot_id
        manifests = snapshot.manifests(table.io)
        deletes = [m for m in manifests if m.content == ManifestContent.DELETES]
        data = [m for m in manifests if m.content == ManifestContent.DATA]
        accept: Callable[[Any], bool] = lambda _: True  # noqa: E731
        if added_only:
            data = [m for m in data if m.added_snapshot_id == sid]

            def accept(e: Any) -> bool:
                return bool(
                    e.data_file.content != DataFileContent.DATA
                    or (e.status == ManifestEntryStatus.ADDED and e.snapshot_id == sid)
                )

        planner = self._planner(table)
        for manifest in data:
            for task in self._plan(planner, [manifest, *deletes], accept, snapshot):
                yield task, manifest.manifest_path

    def _planner(self, table: Table) -> Any:
        from pyiceberg.table import ManifestGroupPlanner

        return ManifestGroupPlanner(
            table_metadata=table.metadata,
            io=table.io,
            row_filter=self._row_filter(),
            case_sensitive=self.config.case_sensitive,
        )

    def _plan(
        self, planner: Any, manifests: list[Any], accept: Callable[[Any], bool], snap: Snapshot
    ) -> list[FileScanTask]:
        try:
            return list(planner.plan_files(manifests, manifest_entry_filter=accept))
        except ValueError as e:
            if "equality deletes" not in str(e):
                raise
            raise OSError(
                f"{self._where()}: snapshot {snap.snapshot_id} has equality delete files, "
                "which pyiceberg cannot apply yet; rewrite them into position deletes or data "
                "files (Spark: CALL system.rewrite_position_delete_files / rewrite_data_files)"
            ) from None

    def _row_filter(self) -> BooleanExpression:
        from pyiceberg.expressions import AlwaysTrue
        from pyiceberg.expressions.parser import parse

        return parse(self.config.filter) if self.config.filter else AlwaysTrue()

    def exhausted(self, cursor: Cursor) -> bool | None:
        """Snapshot mode: the framework decides (nothing new). Follow modes: never without
        end_snapshot_id; with it, not before that snapshot is in the table."""
        if self.config.mode == "snapshot":
            return None
        end_id = self.config.end_snapshot_id
        if end_id is None:
            return False
        if self.load().metadata.snapshot_by_id(end_id) is None:
            return False
        return None

    # --- reading ----------------------------------------------------------------------

    def read(self, item: WorkItem) -> Iterator[pa.RecordBatch]:
        """The file's rows as of the item's snapshot (delete files applied, ``filter``
        applied), from record ``item.start`` on, in the table's columns. A marker reads
        nothing. Raises FileNotFoundError when the snapshot or file was expired."""
        import pyarrow as pa
        from pyiceberg.io.pyarrow import ArrowScan
        from pyiceberg.manifest import DataFileContent, ManifestContent

        from airflow_connectors.formats.base import conform

        path = item.meta.get("file")
        if path is None:
            return
        sid = item.meta.get("snapshot_id")
        table = self.load(fresh=False)
        snapshot = table.metadata.snapshot_by_id(sid) if isinstance(sid, int) else None
        if snapshot is None:
            table = self.load()
            snapshot = table.metadata.snapshot_by_id(sid) if isinstance(sid, int) else None
        if snapshot is None:
            raise FileNotFoundError(
                f"{self._where()}: snapshot {sid} of {item.key} was expired before it was "
                "read; reset the connector's offsets to read the table again"
            )
        manifests = [
            m
            for m in snapshot.manifests(table.io)
            if m.manifest_path == item.meta.get("manifest") or m.content == ManifestContent.DELETES
        ]
        tasks = self._plan(
            self._planner(table),
            manifests,
            lambda e: bool(
                e.data_file.content != DataFileContent.DATA or e.data_file.file_path == path
            ),
            snapshot,
        )
        if not tasks:
            raise FileNotFoundError(
                f"{self._where()}: data file {path} is no longer listed in snapshot {sid}"
            )
        schema = table.metadata.schema()
        names = [c.name for c in self.table.columns if _has(schema, c.name, self.config)]
        scan = ArrowScan(
            table.metadata,
            table.io,
            schema.select(*names, case_sensitive=self.config.case_sensitive),
            self._row_filter(),
            case_sensitive=self.config.case_sensitive,
        )
        target = self.table.arrow_schema()
        skip = item.start
        for rb in scan.to_record_batches(tasks[:1]):
            if skip >= rb.num_rows:
                skip -= rb.num_rows
                continue
            rb = rb.slice(skip)
            skip = 0
            data = pa.Table.from_batches([rb])
            if not self.config.case_sensitive:
                data = data.rename_columns(_table_names(data.column_names, self.table))
            yield from conform(data, self.table, target).to_batches()


def _after_cursor(item: WorkItem, cursor: Cursor) -> WorkItem | None:
    """``item`` as discovery lists it after ``cursor``: None when it is committed (below
    the watermark, completed) or in flight; from its committed offset when part of it is."""
    if cursor.watermark is not None and item.key <= cursor.watermark:
        return None
    if item.key in cursor.in_flight:
        return None
    done = cursor.get(item.key)
    if done is None:
        return item
    if done.completed:
        return None
    left = None if item.records is None else max(0, item.records - done.offset)
    return dataclasses.replace(item, start=done.offset, records_done=done.records, records=left)


def _start_read(cursor: Cursor) -> bool:
    """Whether every key of the start snapshot is committed: the watermark reached the
    last key its first key's row names."""
    known = [*cursor.offsets, *cursor.in_flight]
    if cursor.watermark is None or not known:
        return False
    first = cursor.offsets.get(min(known))
    last = None if first is None else first.meta.get(LAST_KEY)
    return isinstance(last, str) and last <= cursor.watermark


def _seq(snapshot: Snapshot) -> int:
    return int(snapshot.sequence_number or 0)


def _has(schema: Any, name: str, config: IcebergInputConfig) -> bool:
    """Whether the Iceberg schema has a top-level column ``name``."""
    if config.case_sensitive:
        return name in schema.column_names
    return name.lower() in {n.lower() for n in schema.column_names}


def _table_names(names: list[str], table: TableSpec) -> list[str]:
    by_lower = {c.name.lower(): c.name for c in table.columns}
    return [by_lower.get(n.lower(), n) for n in names]


def _some_ids(table: Table) -> str:
    ids = [str(s.snapshot_id) for s in table.metadata.snapshots[-5:]]
    return ", ".join(ids) + (" (the last 5)" if len(table.metadata.snapshots) > 5 else "") or "none"


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__
