"""The catalog of rendered specs (``ac_specs``)."""

from __future__ import annotations

import time
from typing import Any

import sqlalchemy as sa

from airflow_connectors.state import schema as s
from airflow_connectors.state.database import Database
from airflow_connectors.state.records import ConnectorRef


class Catalog(Database):
    """Connectors registered when Airflow parsed their DAG files."""

    def register_specs(self, pipeline: str, entries: dict[tuple[str, str], dict[str, Any]]) -> int:
        """Record the connectors a spec renders to (``(table, connector) -> {"table":
        ..., "connector": ...}``); rows of connectors no longer in the spec are removed.
        Writes only what changed; returns how many rows changed."""
        import hashlib
        import json

        now = time.time()
        changed = 0
        with self.tx() as conn:
            have = {
                (r.table_name, r.connector): r.digest
                for r in conn.execute(
                    sa.select(s.specs.c.table_name, s.specs.c.connector, s.specs.c.digest).where(
                        s.specs.c.pipeline == pipeline
                    )
                )
            }
            for (table, connector), doc in entries.items():
                digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
                if have.get((table, connector)) == digest:
                    continue
                ref = ConnectorRef(pipeline, table, connector)
                values = {"spec": doc, "digest": digest, "updated_at": now}
                if (table, connector) in have:
                    conn.execute(sa.update(s.specs).where(ref.where(s.specs)).values(**values))
                else:
                    conn.execute(
                        sa.insert(s.specs).values(
                            pipeline=pipeline, table_name=table, connector=connector, **values
                        )
                    )
                changed += 1
            for table, connector in set(have) - set(entries):
                conn.execute(
                    sa.delete(s.specs).where(
                        ConnectorRef(pipeline, table, connector).where(s.specs)
                    )
                )
                changed += 1
        return changed

    def catalog(self, pipeline: str | None = None) -> dict[ConnectorRef, dict[str, Any]]:
        """Registered connectors and their specs, ordered by name."""
        q = sa.select(s.specs).order_by(
            s.specs.c.pipeline, s.specs.c.table_name, s.specs.c.connector
        )
        if pipeline is not None:
            q = q.where(s.specs.c.pipeline == pipeline)
        with self.tx() as conn:
            rows = conn.execute(q).all()
        return {ConnectorRef(r.pipeline, r.table_name, r.connector): r.spec for r in rows}
