"""Reading and editing committed offsets (Kafka Connect's KIP-875): only a stopped
connector's offsets change outside a batch commit."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from airflow_connectors.state import ranges
from airflow_connectors.state import schema as s
from airflow_connectors.state import watermark as wm
from airflow_connectors.state.connectors import Connectors
from airflow_connectors.state.records import BatchStatus, ConnectorNotStopped, ConnectorRef


class Offsets(Connectors):
    """Committed offsets per source key (``ac_offsets``)."""

    def offsets(self, ref: ConnectorRef) -> list[dict[str, Any]]:
        """Committed offsets per source key."""
        with self.tx() as conn:
            rows = conn.execute(
                sa.select(s.offsets).where(ref.where(s.offsets)).order_by(s.offsets.c.key)
            ).all()
        return [
            {
                "key": r.key,
                "offset": r.offset,
                "records": r.records,
                "completed": bool(r.completed),
                **({"meta": r.meta} if r.meta else {}),
            }
            for r in rows
        ]

    def watermark(self, ref: ConnectorRef) -> dict[str, Any] | None:
        """The connector's watermark, or None while it has none: ``key`` (every key up
        to it is committed; committed keys below it that are older than ``late_after``
        have no offsets row any more), ``late_after`` (epoch seconds, the source's
        clock) and ``since_relist`` (discoveries since the last complete re-list)."""
        with self.tx() as conn:
            mark = wm.load(conn, ref)
        if mark.watermark is None:
            return None
        return {
            "key": mark.watermark,
            "late_after": mark.late_after,
            "since_relist": min(mark.since_relist, wm.FORCE_RELIST),
        }

    def request_relist(self, ref: ConnectorRef) -> None:
        """Make the connector's next discovery list every key, below the watermark too
        (a probe found a late key there; see ``engine.discovery``)."""
        with self.tx() as conn:
            wm.request_relist(conn, ref)

    def edit_offsets(self, ref: ConnectorRef, entries: Sequence[dict[str, Any]] | None) -> None:
        """Set the offsets of the given keys (``offset: None`` forgets a key), or forget
        every key (``entries=None``, which also drops the watermark). Only a stopped
        connector's offsets may change: nothing is in flight then.

        Editing keeps the watermark's promise (every key up to it is committed, see
        :mod:`.watermark`): forgetting a key at or below it lowers the watermark below
        that key when no collapsed key lies in between, else leaves an incomplete row at
        offset 0 for it; either way the key is read again from its start, and only it.
        Setting a key at or below the watermark makes the next discovery a re-list, so
        the new offset is acted on. Ranges of an edited key that were committed ahead of
        a range the stop released (:mod:`.ranges`) are forgotten: the edit says where
        the key is read from."""
        with self.tx() as conn:
            stopped = conn.execute(
                sa.select(s.connectors.c.stopped).where(ref.where(s.connectors))
            ).scalar()
            if not stopped:
                raise ConnectorNotStopped(
                    f"connector {ref} is not stopped; stop it first (its planned batches are "
                    "then released), edit its offsets, then resume it"
                )
            in_flight = conn.execute(
                sa.select(sa.func.count())
                .select_from(s.batches)
                .where(ref.where(s.batches), s.batches.c.status == BatchStatus.PLANNED.value)
            ).scalar()
            if in_flight:
                raise ConnectorNotStopped(
                    f"connector {ref} has {in_flight} planned batch(es) in flight; stop it "
                    "again (which releases them), then edit its offsets"
                )
            if entries is None:
                conn.execute(sa.delete(s.offsets).where(ref.where(s.offsets)))
                ranges.forget(conn, ref)
                wm.reset(conn, ref)
            for e in entries or ():
                # The key is read from where the edit says: ranges of it committed ahead
                # of a released one are forgotten with its offset.
                ranges.forget(conn, ref, e["key"])
                where = sa.and_(ref.where(s.offsets), s.offsets.c.key == e["key"])
                old_meta = conn.execute(sa.select(s.offsets.c.meta).where(where)).scalar()
                conn.execute(sa.delete(s.offsets).where(where))
                if e.get("offset") is None:
                    wm.forget(conn, ref, e["key"], old_meta)
                else:
                    conn.execute(
                        sa.insert(s.offsets).values(
                            pipeline=ref.pipeline,
                            table_name=ref.table,
                            connector=ref.connector,
                            key=e["key"],
                            offset=int(e["offset"]),
                            records=int(e.get("records", 0)),
                            completed=bool(e.get("completed", False)),
                            meta=e.get("meta"),
                            batch_id=0,
                        )
                    )
                    wm.edited(conn, ref, e["key"])
            # The input is no longer known to be exhausted, and re-reading it is a new
            # finish: its `finished` event is emitted again.
            conn.execute(
                sa.update(s.connectors)
                .where(ref.where(s.connectors))
                .values(
                    end_of_input=False,
                    finished_at=None,
                    finished_signalled_for=None,
                    finished_signal_run=None,
                    updated_at=time.time(),
                )
            )
