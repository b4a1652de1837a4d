"""``sqlite_log``: a sequence source over a partitioned message log kept in SQLite, the
shape of a Kafka topic in one file. The tests of :mod:`airflow_connectors.transports.
sequence` install it (module plus entry point) and run it as a connector.

The log (:class:`Log` writes it as a producer and an administrator would):

- ``messages(part, seq, body)``: the messages, numbered per partition from 1;
- ``partitions(part, first_seq, last_seq)``: each partition's first available sequence
  (the log start: a purge moves it up) and its last one (the high watermark minus one);
- ``acks(grp, part, position)``: a consumer group's committed positions, which the
  transport's ``acknowledge`` writes.

A deleted message leaves a hole between the bounds, as compaction does in Kafka.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import closing

from pydantic import Field

from airflow_connectors.spec.config import StrictConfig
from airflow_connectors.transports.sequence import Partition, SequenceSource

SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (part INTEGER, seq INTEGER, body TEXT,
                                     PRIMARY KEY (part, seq));
CREATE TABLE IF NOT EXISTS partitions (part INTEGER PRIMARY KEY, first_seq INTEGER,
                                       last_seq INTEGER);
CREATE TABLE IF NOT EXISTS acks (grp TEXT, part INTEGER, position INTEGER,
                                 PRIMARY KEY (grp, part));
"""


class SqliteLogConfig(StrictConfig):
    """Where the log is, and how to read it."""

    path: str = Field(description="The SQLite file of the log.")
    group: str = Field(default="ac", description="The consumer group acknowledged.")
    follow: bool = Field(default=False, description="Never end; read what is appended.")


class SqliteLogTransport(SequenceSource):
    """Each partition of the log is a partition of the sequence source (``log/<n>``)."""

    name = "sqlite_log"
    Config = SqliteLogConfig
    config: SqliteLogConfig
    source_kind = "log"

    @property
    def bounded(self) -> bool:
        return not self.config.follow

    def _db(self) -> closing[sqlite3.Connection]:
        return closing(sqlite3.connect(self.config.path, timeout=30))

    def partitions(self) -> list[Partition]:
        with self._db() as db:
            bounds = db.execute("SELECT part, first_seq, last_seq FROM partitions").fetchall()
            parts = []
            for part, first, last in bounds:
                present = {
                    s
                    for (s,) in db.execute(
                        "SELECT seq FROM messages WHERE part = ? AND seq BETWEEN ? AND ?",
                        (part, first, last),
                    )
                }
                removed = tuple(s for s in range(first, last + 1) if s not in present)
                parts.append(Partition(f"log/{part:03d}", first, last, removed))
        return parts

    def where(self, partition: str) -> str:
        return f"partition {partition} of {self.config.path}"

    def read_range(self, partition: str, first: int, last: int) -> Iterator[bytes]:
        with self._db() as db:
            rows = db.execute(
                "SELECT body FROM messages WHERE part = ? AND seq BETWEEN ? AND ? ORDER BY seq",
                (int(partition.split("/")[1]), first, last),
            ).fetchall()
        if rows:
            yield "".join(f"{body}\n" for (body,) in rows).encode()

    def acknowledge(self, positions: Mapping[str, int]) -> None:
        with self._db() as db, db:
            db.executemany(
                "INSERT INTO acks VALUES (?, ?, ?) ON CONFLICT (grp, part) "
                "DO UPDATE SET position = excluded.position",
                [(self.config.group, int(k.split("/")[1]), p) for k, p in positions.items()],
            )


class Log:
    """The producer and administrator side of a log file."""

    def __init__(self, path: str) -> None:
        self.path = path
        with closing(sqlite3.connect(path)) as db, db:
            db.executescript(SCHEMA)

    def _run(self, sql: str, *args: object) -> list[tuple[object, ...]]:
        with closing(sqlite3.connect(self.path, timeout=30)) as db, db:
            return db.execute(sql, args).fetchall()

    def create(self, part: int) -> None:
        """An empty partition (sequences start at 1)."""
        self._run("INSERT INTO partitions VALUES (?, 1, 0)", part)

    def append(self, part: int, bodies: list[str]) -> None:
        """Messages at the partition's next sequences."""
        with closing(sqlite3.connect(self.path, timeout=30)) as db, db:
            (last,) = db.execute(
                "SELECT last_seq FROM partitions WHERE part = ?", (part,)
            ).fetchone()
            db.executemany(
                "INSERT INTO messages VALUES (?, ?, ?)",
                [(part, last + 1 + i, body) for i, body in enumerate(bodies)],
            )
            db.execute(
                "UPDATE partitions SET last_seq = ? WHERE part = ?", (last + len(bodies), part)
            )

    def delete(self, part: int, seq: int) -> None:
        """Remove one message (compaction): a hole between the bounds."""
        self._run("DELETE FROM messages WHERE part = ? AND seq = ?", part, seq)

    def purge_below(self, part: int, seq: int) -> None:
        """Remove every message below ``seq`` (retention): the log starts at ``seq``."""
        self._run("DELETE FROM messages WHERE part = ? AND seq < ?", part, seq)
        self._run("UPDATE partitions SET first_seq = MAX(first_seq, ?) WHERE part = ?", seq, part)

    def acks(self, group: str = "ac") -> dict[int, int]:
        """The group's committed position per partition."""
        rows = self._run("SELECT part, position FROM acks WHERE grp = ?", group)
        return {int(p): int(pos) for p, pos in rows}  # type: ignore[call-overload]
