"""``delta_table_input``: a Delta Lake table (a local folder, ``file://`` or ``s3://``) read
through ``deltalake`` (delta-rs) and pyarrow, with Feldera's config shape.

Offsets are table versions. A work item is one data file of one version, keyed
``v<version, 20 digits>/<file path as the log writes it>``: keys sort by version, then
path, so the cursor's watermark (every key up to it committed) says which version the
connector has read through, and following resumes there without looking at older
versions. ``start``/``end`` count the file's records (from the log's statistics, else
the Parquet footer), so a file is resumed at a record boundary. Once started, a follow
discovery reads the commit files of new versions one after another until the next one
does not exist yet: it never loads the table's state, so it costs what is new.

- ``snapshot``: the files of the table at the start version (``version``, else the one
  current at ``datetime``, else the latest when the connector first runs) are the work,
  all keyed under that version; end of input once they are committed.
- ``follow``: each version after the start version is new work: the files its commit
  ADDS with ``dataChange: true`` (read from ``_delta_log/<version>.json``). Versions
  that only rewrite files (``dataChange: false``: OPTIMIZE/compaction, Z-order) add no
  rows and are passed over. A version that removes rows (DELETE, UPDATE, MERGE,
  overwrite: a ``remove`` with ``dataChange: true``) cannot be mirrored by an
  append-only table: ``on_remove`` says what happens (``fail``, the default, stops
  discovery with an error naming the version; ``skip_version`` or ``ingest_added``
  record a transport error and go on). End of input only at ``end_version``
  (inclusive), once the table has reached it and everything up to it is committed.
- ``snapshot_and_follow``: the snapshot at the start version, then follow.

Without ``version``/``datetime`` the start version is fixed by the first discovery: in
``follow`` mode (or when the snapshot holds no file) it plans a marker item (key
``v<version>``, no records) whose commit records it, so versions written between runs
are never skipped. Later discoveries take the start version from the committed keys.

Unsupported, rejected with an error naming the table: deletion vectors and column
mapping (both change what a data file means; read such tables with Spark's Delta
reader), and a commit removed by log cleanup before it was followed. Partition columns
are filled from the log's partition values. The ``filter`` (every file) and
``snapshot_filter`` (snapshot files) are evaluated per batch with pyarrow (see
:mod:`._delta_filter` for the supported SQL subset); offsets count the file's records
before filtering, so a resumed file skips the same rows whichever matched.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal
from urllib.parse import unquote, urlsplit

from pydantic import AliasChoices, Field, field_validator, model_validator

from airflow_connectors.connections import aws as _aws
from airflow_connectors.connections.aws import AwsConfigFields, AwsSettings
from airflow_connectors.spec.config import StrictConfig
from airflow_connectors.spec.datasets import LineageDataset, storage_dataset
from airflow_connectors.transports import _delta_filter
from airflow_connectors.transports.base import Cursor, Limits, Transport, WorkItem

if TYPE_CHECKING:
    from pathlib import Path

    import pyarrow as pa
    from deltalake import DeltaTable
    from pyarrow import fs as pafs

    from airflow_connectors.spec.models import TableSpec

NAME = "delta_table_input"
#: Digits of the version in a key (Delta's own log file names use 20).
VERSION_DIGITS = 20
#: Versions one discovery reads the commits of at most; past it the scan continues in
#: the next discovery (a marker item records progress through versions without rows).
MAX_VERSIONS_PER_DISCOVERY = 1000
#: Rows per record batch read from a data file.
READ_BATCH_ROWS = 65_536
_LOCAL_SCHEMES = ("", "file")
_S3_SCHEMES = ("s3", "s3a")


class DeltaTableInputConfig(AwsConfigFields, StrictConfig):
    """Feldera's ``delta_table_input`` config (without cdc mode and transaction modes),
    plus S3 settings like ``s3_input`` and what to do with versions that remove rows."""

    uri: str = Field(
        min_length=1,
        description="The Delta table: a local folder, file:///path or s3://bucket/prefix "
        "(also s3a://). S3 endpoint, region and credentials come from the fields below, "
        "else the aws_conn_id connection, else the AWS_* environment.",
    )
    mode: Literal["snapshot", "follow", "snapshot_and_follow"] = Field(
        description="snapshot: read the table as of the start version, then end the input. "
        "follow: read the rows each later version appends. snapshot_and_follow: both.",
    )
    version: int | None = Field(
        default=None,
        ge=0,
        description="Start version: the snapshot's version, and follow reads the versions "
        "after it. At most one of version and datetime; neither: the latest version when "
        "the connector first runs. Feldera's alias: start_version.",
        validation_alias=AliasChoices("version", "start_version"),
    )
    datetime: str | None = Field(
        default=None,
        description="Start at the version current at this time (RFC 3339, e.g. "
        "2024-06-01T00:00:00Z; the commit timestamps of the table's log). At most one of "
        "version and datetime. Feldera's alias: start_datetime.",
        validation_alias=AliasChoices("datetime", "start_datetime"),
    )
    end_version: int | None = Field(
        default=None,
        ge=0,
        description="follow modes: the last version to read (inclusive); the input ends "
        "once the table has reached it and everything up to it is committed. Unset: "
        "follow forever.",
    )
    filter: str | None = Field(
        default=None,
        description="Only rows for which this SQL condition is true: comparisons of a column "
        "with a literal (=, <>, <, <=, >, >=), IN, BETWEEN, IS [NOT] NULL, AND, OR, NOT; "
        "literals: numbers, 'text', TRUE/FALSE, DATE '...', TIMESTAMP '...'. Applies to "
        "the snapshot and to followed versions.",
    )
    snapshot_filter: str | None = Field(
        default=None,
        description="snapshot modes: a condition (as filter) applied to the snapshot only, "
        "on top of filter; followed versions are not filtered by it.",
    )
    on_remove: Literal["fail", "skip_version", "ingest_added"] = Field(
        default="fail",
        description="follow modes, a version that removes rows (DELETE, UPDATE, MERGE, "
        "overwrite): fail (stop with an error naming it; set end_version before it or "
        "change this), skip_version (read nothing of it), ingest_added (read the files "
        "it adds: rewritten rows land again). Both record a transport error. Versions "
        "that only compact files are always passed over.",
    )

    @field_validator("uri")
    @classmethod
    def _known_scheme(cls, v: str) -> str:
        scheme = urlsplit(v).scheme.lower() if "://" in v else ""
        if scheme not in _LOCAL_SCHEMES + _S3_SCHEMES:
            raise ValueError(
                f"unsupported URI scheme {scheme!r}; use a local folder, file:///path or "
                "s3://bucket/prefix"
            )
        if scheme in _S3_SCHEMES and not urlsplit(v).netloc:
            raise ValueError("an S3 URI needs a bucket: s3://bucket/prefix")
        return v

    @field_validator("datetime")
    @classmethod
    def _rfc3339(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                dt.datetime.fromisoformat(v)
            except ValueError:
                raise ValueError(
                    f"{v!r} is not an RFC 3339 time; write e.g. 2024-06-01T00:00:00Z"
                ) from None
        return v

    @field_validator("filter", "snapshot_filter")
    @classmethod
    def _parsable(cls, v: str | None) -> str | None:
        if v is not None:
            _delta_filter.parse(v)
        return v

    @model_validator(mode="after")
    def _consistent(self) -> DeltaTableInputConfig:
        if self.version is not None and self.datetime is not None:
            raise ValueError("at most one of 'version' and 'datetime' options can be specified")
        if self.snapshot_filter is not None and self.mode == "follow":
            raise ValueError("snapshot_filter applies to the snapshot modes, not to follow")
        if self.end_version is not None and self.mode == "snapshot":
            raise ValueError(
                "end_version applies to the follow modes; a snapshot ends after the snapshot"
            )
        if (
            self.end_version is not None
            and self.version is not None
            and self.end_version < self.version
        ):
            raise ValueError(
                f"end_version {self.end_version} is before the start version {self.version}"
            )
        return self


def version_key(version: int, path: str | None = None) -> str:
    """The key of ``path`` added at ``version`` (None: the version's marker)."""
    head = f"v{version:0{VERSION_DIGITS}d}"
    return head if path is None else f"{head}/{path}"


def key_version(key: str) -> int | None:
    """The version of a key of this transport; None for a key of another shape."""
    head = key[1 : 1 + VERSION_DIGITS]
    if key[:1] != "v" or len(head) != VERSION_DIGITS or not head.isdigit():
        return None
    return int(head)


class DeltaTableInputTransport(Transport):
    """Reads a Delta table's data files (snapshot) and the files later versions add
    (follow). Integrated: ``read`` yields record batches of the table's columns."""

    name = NAME
    Config = DeltaTableInputConfig
    config: DeltaTableInputConfig
    connection_fields: ClassVar[Mapping[str, str]] = {"aws_conn_id": _aws.KIND}
    needs_format = False

    def __init__(self, config: StrictConfig, table: TableSpec) -> None:
        if not isinstance(config, DeltaTableInputConfig):
            raise TypeError(f"{NAME} needs a DeltaTableInputConfig, got {type(config).__name__}")
        super().__init__(config, table)
        self._filter = None if config.filter is None else _delta_filter.parse(config.filter)
        self._snapshot_filter = (
            None if config.snapshot_filter is None else _delta_filter.parse(config.snapshot_filter)
        )
        #: Delta types of filtered columns that are not table columns (partition values
        #: are text in the log; a filter compares them as their type).
        self._filter_types: dict[str, str] = {}
        self._fs: tuple[pafs.FileSystem, str] | None = None
        self._secrets: set[str] = set()

    @classmethod
    def resolve_config(cls, raw: dict[str, object], base_dir: Path | None) -> dict[str, object]:
        """Make a relative local ``uri`` absolute against the spec file's folder."""
        uri = raw.get("uri")
        if isinstance(uri, str) and base_dir is not None and "://" not in uri:
            path = os.path.expanduser(uri)
            if path and not os.path.isabs(path):
                return {**raw, "uri": str(base_dir / path)}
        return raw

    # --- where the table is ---------------------------------------------------------

    @property
    def _scheme(self) -> str:
        uri = self.config.uri
        return urlsplit(uri).scheme.lower() if "://" in uri else ""

    def _aws(self) -> AwsSettings:
        """Endpoint, region and credentials: config, else connection, else environment."""
        settings = AwsSettings.resolve(self.config, who=NAME).with_environment()
        self._secrets = settings.secrets()
        return settings

    def storage_options(self) -> dict[str, str] | None:
        """delta-rs storage options of the table (None for a local table)."""
        return self._aws().storage_options() if self._scheme in _S3_SCHEMES else None

    def filesystem(self) -> tuple[pafs.FileSystem, str]:
        """The pyarrow filesystem of the table and the table's root path in it."""
        if self._fs is None:
            from pyarrow import fs as pafs

            uri = self.config.uri
            if self._scheme not in _S3_SCHEMES:
                local = urlsplit(uri).path if self._scheme == "file" else uri
                self._fs = (pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(local)))
            else:
                url = urlsplit(uri)
                root = f"{url.netloc}/{url.path.strip('/')}".rstrip("/")
                self._fs = (self._aws().pyarrow_filesystem(), root)
        return self._fs

    def _where(self) -> str:
        from airflow_connectors.spec.redact import mask_url

        return f"{NAME}: the Delta table at {mask_url(self.config.uri)}"

    def _why(self, e: BaseException) -> str:
        from airflow_connectors.spec.redact import mask_text

        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        return mask_text(lines[0] if lines else type(e).__name__, self._secrets)

    def _open(self, version: int | None = None) -> DeltaTable:
        """The table (at ``version``, else the latest). Raises a
        one-line ``OSError`` when there is no Delta table at the URI."""
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            return DeltaTable(
                self.config.uri,
                version=version,
                storage_options=self.storage_options(),
            )
        except TableNotFoundError:
            raise FileNotFoundError(
                f"{self._where()} does not exist (no _delta_log); check the uri"
            ) from None
        except Exception as e:
            at = "" if version is None else f" at version {version}"
            raise OSError(f"{self._where()}{at} cannot be opened: {self._why(e)}") from e

    # --- discovery ------------------------------------------------------------------

    @property
    def bounded(self) -> bool:
        """A snapshot ends; the follow modes only at ``end_version``."""
        return self.config.mode == "snapshot" or self.config.end_version is not None

    def exhausted(self, cursor: Cursor) -> bool | None:
        """Follow modes: never without ``end_version``, and not before the table has
        reached it; otherwise the framework decides (nothing new to discover)."""
        if not self.bounded:
            return False
        end = self.config.end_version
        if end is not None and self._commit_text(end) is None and not self._cleaned_up(end):
            return False  # the table has not reached end_version yet
        return None

    def _start_version(self, cursor: Cursor) -> int:
        """The start version: ``version``, else the one the committed keys were read
        at, else the one current at ``datetime``, else the latest. Only a connector's
        first discoveries (nothing committed or planned) load the table's state."""
        known = [*cursor.offsets, *cursor.in_flight]
        if cursor.watermark is not None:
            known.append(cursor.watermark)
        versions = [v for v in (key_version(k) for k in known if k) if v is not None]
        if versions:
            return min(versions) if self.config.version is None else self.config.version
        latest = self._open()
        if self.config.version is not None:
            if self.config.version > latest.version():
                raise ValueError(
                    f"{self._where()} has no version {self.config.version} yet (latest: "
                    f"{latest.version()}); set an existing version"
                )
            return self.config.version
        if self.config.datetime is not None:
            at = dt.datetime.fromisoformat(self.config.datetime)
            if at.tzinfo is None:
                at = at.replace(tzinfo=dt.UTC)
            try:
                latest.load_as_version(at)
            except Exception as e:
                raise ValueError(
                    f"{self._where()} has no version at datetime {self.config.datetime} "
                    f"({self._why(e)}); set a later datetime or a version"
                ) from e
            if latest.version() == 0:  # also delta-rs's answer for a time before the table
                self._check_created_by(at)
        return latest.version()

    def _check_created_by(self, at: dt.datetime) -> None:
        """Feldera's error for a ``datetime`` before the table's first commit."""
        text = self._commit_text(0)  # None: cleaned up, older than any datetime asked
        actions = _actions(text) if text is not None else []
        info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        committed = info.get("timestamp")
        if isinstance(committed, int) and committed > at.timestamp() * 1000:
            first = dt.datetime.fromtimestamp(committed / 1000, dt.UTC).isoformat()
            raise ValueError(
                f"{self._where()} has no version at datetime {self.config.datetime} "
                f"(its first version was committed at {first}); set a later datetime "
                "or a version"
            )

    def discover(self, cursor: Cursor, limits: Limits) -> Iterator[WorkItem]:
        """Snapshot files, then the files of each later version, in key order; committed
        and in-flight keys skipped, a key committed part way resumed at its offset."""
        start = self._start_version(cursor)
        plan = _Budget(cursor, limits)
        through = key_version(cursor.watermark) if cursor.watermark else None
        fresh = not (cursor.offsets or cursor.in_flight or cursor.watermark)
        marks_start = fresh and self.config.version is None
        if self.config.mode != "follow" and (through is None or through <= start):
            files = self._snapshot(start)
            if not files and marks_start:
                yield from plan.marker(start)
            yield from plan.admit_all(files)
        elif self.config.mode == "follow" and marks_start:
            yield from plan.marker(start)
        if self.config.mode != "snapshot" and not plan.full:
            yield from self._follow(plan, max(start + 1, through or 0))

    def _follow(self, plan: _Budget, first: int) -> Iterator[WorkItem]:
        """The files versions ``first`` .. (``end_version``) add: commit files are read
        one after another until the next one does not exist yet, so a discovery costs
        the versions that are new, not the table's size."""
        end = self.config.end_version
        version = first
        while end is None or version <= end:
            if version - first >= MAX_VERSIONS_PER_DISCOVERY:
                if plan.emitted == 0:  # record the scan's progress
                    yield from plan.marker(version - 1)
                return
            text = self._commit_text(version)
            if text is None:
                if self._cleaned_up(version):
                    raise FileNotFoundError(
                        f"{self._where()}: the commit of version {version} is gone (log "
                        "cleanup removed it before it was followed); restart the connector "
                        "from a later version (set version, reset its offsets)"
                    )
                return  # not written yet
            yield from plan.admit_all(self._added(version, _actions(text), plan))
            if plan.full:
                return
            version += 1

    def _cleaned_up(self, version: int) -> bool:
        """Whether the commit of ``version`` is missing because a checkpoint covers it
        (log cleanup removes only commits older than a checkpoint)."""
        fs, root = self.filesystem()
        try:
            with fs.open_input_stream(f"{root}/_delta_log/_last_checkpoint") as f:
                checkpoint = json.loads(f.read().decode()).get("version")
        except FileNotFoundError:
            return False
        except (OSError, ValueError) as e:
            raise OSError(
                f"{self._where()}: cannot read _delta_log/_last_checkpoint: {self._why(e)}"
            ) from e
        return isinstance(checkpoint, int) and checkpoint >= version

    def _check_features(self, table: DeltaTable, version: int) -> None:
        """Reject what reading data files directly would get wrong."""
        features = set(table.protocol().reader_features or [])
        mapping = table.metadata().configuration.get("delta.columnMapping.mode", "none")
        if "deletionVectors" in features or mapping != "none":
            what = "deletion vectors" if "deletionVectors" in features else "column mapping"
            raise ValueError(
                f"{self._where()} uses {what} (version {version}), which {NAME} does not "
                "read; rewrite the table without it (e.g. REORG TABLE ... APPLY (PURGE) and "
                "disable the feature) or read it with Spark's Delta reader"
            )

    def _check_columns(self, table: DeltaTable, *, snapshot: bool = False) -> None:
        """The filters' columns must exist in the Delta table; notes the Delta types of
        those that are not table columns."""
        trees = [self._filter, self._snapshot_filter if snapshot else None]
        for name, tree in zip(("filter", "snapshot_filter"), trees, strict=True):
            if tree is None:
                continue
            fields = {f.name: f.type for f in table.schema().fields}
            missing = sorted(_delta_filter.columns(tree) - set(fields))
            if missing:
                raise ValueError(
                    f"{self._where()}: the {name} names {', '.join(missing)}, which the table "
                    f"does not have (its columns: {', '.join(fields)})"
                )
            for col in _delta_filter.columns(tree) - set(self.table.column_names):
                kind = getattr(fields[col], "type", None)
                if isinstance(kind, str):
                    self._filter_types[col] = kind

    def _snapshot(self, version: int) -> list[WorkItem]:
        """The data files of the table at ``version``, sorted by path."""
        import pyarrow as pa

        table = self._open(version)
        self._check_features(table, version)
        self._check_columns(table, snapshot=True)
        try:
            actions = pa.table(table.get_add_actions(flatten=False))
        except Exception as e:
            raise OSError(f"{self._where()}: cannot list version {version}: {self._why(e)}") from e
        rows = actions.select(
            [
                n
                for n in ("path", "size_bytes", "num_records", "partition")
                if n in actions.schema.names
            ]
        ).to_pylist()
        items = [
            self._item(
                version,
                r["path"],
                r.get("num_records"),
                r["size_bytes"],
                {k: None if v is None else str(v) for k, v in (r.get("partition") or {}).items()},
                snapshot=True,
            )
            for r in rows
        ]
        return sorted(items, key=lambda i: i.key)

    def _item(
        self,
        version: int,
        path: str,
        records: int | None,
        size: int | None,
        partition: dict[str, str | None],
        *,
        snapshot: bool = False,
    ) -> WorkItem:
        if records is None:  # no statistics in the log: the Parquet footer knows
            import pyarrow.parquet as pq

            fs, _ = self.filesystem()
            with fs.open_input_file(self._file(path)) as f:
                records = pq.ParquetFile(f).metadata.num_rows
        return WorkItem(
            key=version_key(version, path),
            start=0,
            end=records,
            records=records,
            size=size,
            meta={
                "path": path,
                **({"partition": partition} if partition else {}),
                **({"snapshot": True} if snapshot and self._snapshot_filter else {}),
                **({"types": dict(self._filter_types)} if self._filter_types else {}),
            },
        )

    def _commit_text(self, version: int) -> str | None:
        """The text of ``version``'s commit file; None when there is none."""
        from pyarrow import fs as pafs

        from airflow_connectors.transports import retry

        fs, root = self.filesystem()
        path = f"{root}/_delta_log/{version:020d}.json"

        def fetch() -> str | None:
            if fs.get_file_info(path).type == pafs.FileType.NotFound:
                return None
            with fs.open_input_stream(path) as f:
                return str(f.read().decode())

        try:  # transient errors (throttling, resets) under the connector's retry policy
            return retry.retrying(self.retry, f"{NAME}: read commit {version}", fetch)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise OSError(
                f"{self._where()}: cannot read the commit of version {version}: {self._why(e)}"
            ) from e

    def _added(self, version: int, actions: list[dict[str, Any]], plan: _Budget) -> list[WorkItem]:
        """The files ``version`` adds with new rows (see the module doc for removes). A
        version that removes rows and is read on (``on_remove``) starts with its marker
        item, so it is reported once: until the marker is committed."""
        adds, removed, operation = [], 0, "?"
        for action in actions:
            if "commitInfo" in action:
                operation = str(action["commitInfo"].get("operation", "?"))
            elif "add" in action and action["add"].get("dataChange", True):
                adds.append(action["add"])
            elif "remove" in action and action["remove"].get("dataChange", True):
                removed += 1
            elif "protocol" in action or "metaData" in action:
                self._check_features(self._open(version), version)
        if any(a.get("deletionVector") for a in adds):
            raise ValueError(
                f"{self._where()}: version {version} ({operation}) adds files with deletion "
                f"vectors, which {NAME} does not read; read the table with Spark's Delta reader"
            )
        if removed:
            if self.config.on_remove == "fail":
                raise ValueError(
                    f"{self._where()}: version {version} ({operation}) removes rows from "
                    f"{removed} file(s), which an appending connector cannot mirror; set "
                    f"end_version to {version - 1}, or on_remove: skip_version or ingest_added"
                )
            marker = _marker(version)
            if not plan.known(marker.key):
                what = "skipped" if self.config.on_remove == "skip_version" else "read its adds"
                self.notices.append(
                    (
                        f"{NAME}: version {version} ({operation}) removes rows from {removed} "
                        f"file(s); on_remove: {self.config.on_remove}: {what}; the removed "
                        "rows stay in the table",
                        marker.key,
                    )
                )
            if self.config.on_remove == "skip_version":
                return [marker]
        if adds and self._filter is not None:
            self._check_columns(self._open(version))
        items = [
            self._item(
                version,
                a["path"],
                _num_records(a.get("stats")),
                a.get("size"),
                dict(a.get("partitionValues") or {}),
            )
            for a in adds
        ]
        return ([marker] if removed else []) + sorted(items, key=lambda i: i.key)

    # --- reading --------------------------------------------------------------------

    def _file(self, path: str) -> str:
        """The filesystem path of a data file named as the log names it."""
        if "://" in path:
            url = urlsplit(path)
            if url.scheme.lower() in _S3_SCHEMES:
                return f"{url.netloc}/{unquote(url.path.lstrip('/'))}"
            return unquote(url.path)
        _, root = self.filesystem()
        return f"{root}/{unquote(path)}"

    def read(self, item: WorkItem) -> Iterator[pa.RecordBatch]:
        """The item's records ``[start, end)`` of its data file, partition columns added,
        the filter applied, as batches of the table's columns found in the file."""
        import pyarrow.parquet as pq

        path = item.meta.get("path")
        if path is None or item.end == item.start:
            return  # a marker (or nothing left): no records
        fs, _ = self.filesystem()
        partition: dict[str, str | None] = dict(item.meta.get("partition") or {})
        condition = self._condition(item)
        wanted = set(self.table.column_names) | (
            _delta_filter.columns(condition) if condition else set()
        )
        types = {k: _arrow_type(v) for k, v in dict(item.meta.get("types") or {}).items()}
        with fs.open_input_file(self._file(str(path))) as f:
            pf = pq.ParquetFile(f)
            names = [n for n in pf.schema_arrow.names if n in wanted and n not in partition]
            row, groups = 0, []
            for g in range(pf.metadata.num_row_groups):
                n = pf.metadata.row_group(g).num_rows
                if row + n > item.start:
                    groups.append(g)
                else:
                    row += n
            end = item.end if item.end is not None else pf.metadata.num_rows
            if not groups:
                return  # the file has no records from ``start`` on
            for rb in pf.iter_batches(READ_BATCH_ROWS, row_groups=groups, columns=names):
                lo, hi = max(item.start - row, 0), min(end - row, rb.num_rows)
                row += rb.num_rows
                if hi <= lo:
                    if row >= end:
                        break
                    continue
                batch = self._shape(rb.slice(lo, hi - lo), partition, wanted, condition, types)
                if batch.num_rows:
                    yield batch
                if row >= end:
                    break

    def _condition(self, item: WorkItem) -> tuple[Any, ...] | None:
        """The filter of ``item``: ``filter``, and ``snapshot_filter`` for snapshot files."""
        trees = [self._filter, self._snapshot_filter if item.meta.get("snapshot") else None]
        found = [t for t in trees if t is not None]
        return None if not found else found[0] if len(found) == 1 else ("and", *found)

    def _shape(
        self,
        rb: pa.RecordBatch,
        partition: dict[str, str | None],
        wanted: set[str],
        condition: tuple[Any, ...] | None,
        types: dict[str, pa.DataType],
    ) -> pa.RecordBatch:
        """Partition columns added, the filter applied, the table's columns selected."""
        import pyarrow as pa

        data = pa.Table.from_batches([rb])
        schema = self.table.arrow_schema()
        for name, value in partition.items():
            if name in wanted:
                column = pa.array([value] * data.num_rows, pa.string())
                to = schema.field(name).type if name in schema.names else types.get(name)
                if to is not None:
                    # Typed for the filter; else the table's conversion reports it per record.
                    with contextlib.suppress(pa.ArrowInvalid, pa.ArrowNotImplementedError):
                        column = column.cast(to)
                data = data.append_column(name, column)
        if condition is not None:
            for name in _delta_filter.columns(condition) - set(data.column_names):
                to = types.get(name) or pa.string()
                data = data.append_column(name, pa.nulls(data.num_rows, to))
            data = data.filter(_delta_filter.expression(condition, data.schema))
        keep = [n for n in self.table.column_names if n in data.column_names]
        return (
            data.select(keep).combine_chunks().to_batches()[0]
            if data.num_rows
            else (pa.RecordBatch.from_pylist([], schema=data.select(keep).schema))
        )

    def describe(self) -> str:
        """Mode, URI and version bounds on one line."""
        from airflow_connectors.spec.redact import mask_url

        c = self.config
        parts = [c.mode, mask_url(c.uri)]
        if c.version is not None:
            parts.append(f"from version {c.version}")
        if c.datetime is not None:
            parts.append(f"from {c.datetime}")
        if c.end_version is not None:
            parts.append(f"to version {c.end_version}")
        if c.filter:
            parts.append("filtered")
        return f"{NAME}: {', '.join(parts)}"

    def lineage_datasets(self) -> list[LineageDataset]:
        """The table's storage location."""
        return [storage_dataset(self.config.uri)]


_DELTA_TYPES = {
    "string": "string",
    "long": "int64",
    "integer": "int32",
    "short": "int16",
    "byte": "int8",
    "float": "float",
    "double": "double",
    "boolean": "bool",
    "date": "date32",
    "binary": "binary",
}


def _arrow_type(delta_type: str) -> pa.DataType:
    """The Arrow type of a Delta primitive type (text for what is not listed)."""
    import re

    import pyarrow as pa

    if delta_type == "timestamp":
        return pa.timestamp("us", "UTC")
    if delta_type == "timestamp_ntz":
        return pa.timestamp("us")
    m = re.fullmatch(r"decimal\((\d+),\s*(\d+)\)", delta_type)
    if m:
        return pa.decimal128(int(m.group(1)), int(m.group(2)))
    return pa.type_for_alias(_DELTA_TYPES.get(delta_type, "string"))


def _actions(text: str) -> list[dict[str, Any]]:
    """The actions of a commit file (JSON lines)."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _num_records(stats: object) -> int | None:
    """``numRecords`` of an add action's JSON statistics, when present."""
    if not isinstance(stats, str):
        return None
    try:
        value = json.loads(stats).get("numRecords")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, int) else None


def _marker(version: int) -> WorkItem:
    """A work item without records whose commit records that ``version`` was handled."""
    return WorkItem(key=version_key(version), start=0, end=0, records=0, size=0, meta={})


class _Budget:
    """What one discovery may still hand out, and the cursor it resumes from."""

    def __init__(self, cursor: Cursor, limits: Limits) -> None:
        self.cursor = cursor
        self.records = limits.max_records
        self.items = limits.max_items
        self.emitted = 0

    def marker(self, version: int) -> Iterator[WorkItem]:
        """The marker item of ``version`` (records that the connector started there)."""
        if self.known(version_key(version)) or self.items <= 0:
            return
        self.items -= 1
        self.emitted += 1
        yield _marker(version)

    def known(self, key: str) -> bool:
        """Whether ``key`` is in flight or has committed offsets (or is below the
        watermark)."""
        c = self.cursor
        in_flight = key in c.in_flight or c.get(key) is not None
        return in_flight or (c.watermark is not None and key <= c.watermark)

    def admit_all(self, items: list[WorkItem]) -> Iterator[WorkItem]:
        """:meth:`admit` of each item in order, while the limits allow."""
        for item in items:
            if self.full:
                return
            admitted = self.admit(item)
            if admitted is not None:
                yield admitted

    @property
    def full(self) -> bool:
        """Whether the discovery has handed out as much as its limits allow."""
        return self.items <= 0 or (self.records is not None and self.records <= 0)

    def admit(self, item: WorkItem) -> WorkItem | None:
        """``item`` resumed after the cursor's offset of its key; None when it is
        committed or in flight."""
        c = self.cursor
        if item.key in c.in_flight or (c.watermark is not None and item.key <= c.watermark):
            return None
        done = c.get(item.key)
        end = item.end or 0
        if done is not None and (done.completed or done.offset >= end):
            return None
        if done is not None:
            item = dataclasses.replace(
                item, start=done.offset, records_done=done.records, records=end - done.offset
            )
        self.items -= 1
        self.emitted += 1
        if self.records is not None:
            self.records -= item.records or 0
        return item
