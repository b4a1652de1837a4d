"""The name of one connector in the state store, below every module that names one
(the batch plan, the stored records, the store's tables)."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa


@dataclass(frozen=True)
class ConnectorRef:
    """Names one connector in the store: pipeline, table and connector name."""

    pipeline: str
    table: str
    connector: str

    @property
    def endpoint_name(self) -> str:
        """``table.connector``, the name Feldera's API gives an input endpoint."""
        return f"{self.table}.{self.connector}"

    def __str__(self) -> str:
        return f"{self.pipeline}.{self.table}.{self.connector}"

    def where(self, t: sa.Table) -> sa.ColumnElement[bool]:
        """The condition selecting this connector's rows of a state table."""
        return sa.and_(
            t.c.pipeline == self.pipeline,
            t.c.table_name == self.table,
            t.c.connector == self.connector,
        )
