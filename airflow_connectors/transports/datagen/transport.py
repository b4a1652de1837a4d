"""The ``datagen`` transport: plans become work items (row ranges of one plan), read by
generating their chunks."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from airflow_connectors.spec.config import StrictConfig
from airflow_connectors.transports.base import Cursor, Limits, Transport, WorkItem
from airflow_connectors.transports.datagen.columns import ColumnRecipe, compile_column
from airflow_connectors.transports.datagen.config import (
    DEFAULT_ITEM_ROWS,
    DatagenConfig,
    FieldSettings,
    GenerationPlan,
)
from airflow_connectors.transports.datagen.generation import GEN_CHUNK_ROWS, generate_chunk

if TYPE_CHECKING:
    import pyarrow as pa

    from airflow_connectors.spec.models import TableSpec

#: Rows per discovery of a plan that nothing else bounds (no limit, rate or max_records).
UNBOUNDED_DISCOVERY_ROWS = 1_000_000

_KEY = re.compile(r"^plan-(\d{4,})$")


def plan_key(plan: int) -> str:
    """The work-item key of plan ``plan``; keys sort in plan order."""
    return f"plan-{plan:04d}"


class DatagenTransport(Transport):
    """Generates rows with Feldera's ``datagen`` plans. Integrated: ``read`` yields
    record batches in the table's schema, so no format is needed.

    Work items are row ranges of one plan (key ``plan-NNNN``, ``start``/``end`` row
    indexes within the plan). Plans run in order: discovery never starts a plan while an
    earlier one has rows in flight or not yet generated, and an unlimited plan blocks
    every later plan.
    """

    name = "datagen"
    Config = DatagenConfig
    config: DatagenConfig
    needs_format = False

    def __init__(self, config: StrictConfig, table: TableSpec) -> None:
        if not isinstance(config, DatagenConfig):
            raise TypeError(f"datagen needs a DatagenConfig, got {type(config).__name__}")
        super().__init__(config, table)
        self._columns = self.compile(config, table)

    @classmethod
    def compile(cls, config: DatagenConfig, table: TableSpec) -> list[list[ColumnRecipe]]:
        """Check ``config`` against ``table``: every field must be a column and fit its
        type. Returns each plan's per-column recipes, in table column order."""
        plans = []
        for p, plan in enumerate(config.plan):
            where = f"datagen plan {p}"
            for field in plan.fields:
                if field not in table.column_names:
                    raise ValueError(
                        f"{where}: field {field!r} is not a column of table {table.name!r}; "
                        f"its columns: {', '.join(table.column_names)}"
                    )
            default = FieldSettings()
            plans.append(
                [compile_column(where, c, plan.fields.get(c.name, default)) for c in table.columns]
            )
        return plans

    @property
    def bounded(self) -> bool:
        """Bounded when every plan has a ``limit``."""
        return all(plan.limit is not None for plan in self.config.plan)

    def discover(self, cursor: Cursor, limits: Limits) -> Iterator[WorkItem]:
        """Row ranges of ``worker_chunk_size`` rows (plans in order), as many as the rate
        schedule, ``max_records`` and ``max_items`` allow now."""
        budget = limits.max_records  # rows left to hand out in this discovery
        items_left = limits.max_items
        # Rate schedule: plan p may start once the rated plans before it had time to run.
        start_at = limits.now if cursor.first_discovered_at is None else cursor.first_discovered_at
        for p, plan in enumerate(self.config.plan):
            key = plan_key(p)
            done = self._committed(cursor, p)
            finished = plan.limit is not None and done >= plan.limit
            if not finished:
                if key in cursor.in_flight:
                    return
                end = self._discoverable_end(plan, done, limits.now - start_at, budget)
                step = plan.worker_chunk_size or DEFAULT_ITEM_ROWS
                for start in range(done, end, step):
                    if items_left <= 0:
                        return
                    stop = min(start + step, end)
                    yield WorkItem(
                        key=key,
                        start=start,
                        end=stop,
                        records_done=start,
                        records=stop - start,
                        final=True,
                    )
                    items_left -= 1
                if budget is not None:
                    budget -= max(0, end - done)
                # The next plan may join this discovery only if this one ends in it.
                if plan.limit is None or end < plan.limit:
                    return
            if plan.rate and plan.limit is not None:
                start_at += plan.limit / plan.rate

    @staticmethod
    def _discoverable_end(
        plan: GenerationPlan, done: int, elapsed: float, budget: int | None
    ) -> int:
        """Row index (exclusive) up to which ``plan`` may be generated now."""
        end: float = math.inf if plan.limit is None else plan.limit
        if plan.rate is not None:
            # At least one second's worth, so the first discovery generates something.
            end = min(end, max(plan.rate, math.floor(plan.rate * elapsed)))
        if budget is not None:
            end = min(end, done + budget)
        if math.isinf(end):
            end = done + UNBOUNDED_DISCOVERY_ROWS
        return int(max(end, done))

    def exhausted(self, cursor: Cursor) -> bool:
        """True once every plan of a bounded config has committed its ``limit`` rows."""
        if not self.bounded:
            return False
        return all(
            self._committed(cursor, p) >= (plan.limit or 0)
            for p, plan in enumerate(self.config.plan)
        )

    @staticmethod
    def _committed(cursor: Cursor, plan: int) -> int:
        done = cursor.get(plan_key(plan))
        return 0 if done is None else done.offset

    def read(self, item: WorkItem) -> Iterator[pa.RecordBatch]:
        """Generates the item's rows as record batches in the table's schema. Rows depend only
        on the seed, plan, column and row index, so a re-read yields the same rows. Raises
        ``ValueError`` when the item names no plan or rows outside it."""
        import numpy as np
        import pyarrow as pa

        p = self._plan_of(item)
        assert item.end is not None  # checked by _plan_of
        columns = self._columns[p]
        schema = self.table.arrow_schema()
        seed = self.config.seed or 0
        for chunk in range(item.start // GEN_CHUNK_ROWS, -(-item.end // GEN_CHUNK_ROWS)):
            first = chunk * GEN_CHUNK_ROWS
            arrays = [
                generate_chunk(col, first, np.random.default_rng([seed, p, c, chunk]))
                for c, col in enumerate(columns)
            ]
            batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
            lo = max(item.start, first) - first
            hi = min(item.end, first + GEN_CHUNK_ROWS) - first
            yield batch.slice(lo, hi - lo)

    def _plan_of(self, item: WorkItem) -> int:
        match = _KEY.match(item.key)
        p = int(match.group(1)) if match else -1
        if not 0 <= p < len(self.config.plan):
            raise ValueError(f"datagen: work item key {item.key!r} names no plan of this config")
        limit = self.config.plan[p].limit
        if (
            item.end is None
            or not 0 <= item.start <= item.end
            or (limit is not None and item.end > limit)
        ):
            raise ValueError(f"datagen: rows [{item.start}, {item.end}) are outside plan {p}")
        return p

    def describe(self) -> str:
        """Plans, limit, rates and seed on one line."""
        plans = self.config.plan
        parts = [f"{len(plans)} plan{'' if len(plans) == 1 else 's'}"]
        if self.bounded:
            parts.append(f"limit {sum(plan.limit or 0 for plan in plans)}")
        else:
            parts.append("unlimited")
        rates = [str(plan.rate) for plan in plans if plan.rate]
        if rates:
            parts.append(f"rate {'/'.join(rates)} rows/s")
        parts.append(f"seed {self.config.seed or 0}")
        return f"datagen: {', '.join(parts)}"
