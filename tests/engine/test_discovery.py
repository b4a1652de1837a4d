"""Discovery without Spark: plans, pending batches and templated slices."""

from __future__ import annotations

from pathlib import Path

from helpers import pipeline

from airflow_connectors.engine.discovery import context, discover, new_data_fingerprint
from airflow_connectors.state.store import StateStore


def files_ctx(path: Path, warehouse: str) -> object:
    spec = pipeline(
        {
            "t": {
                "columns": {"id": "BIGINT NOT NULL"},
                "connectors": [
                    {
                        "name": "files",
                        "transport": {
                            "name": "file_input",
                            "config": {"path": str(path), "min_file_age": 0},
                        },
                        "format": {"name": "json", "config": {"update_format": "raw"}},
                    }
                ],
            }
        }
    )
    table = spec.tables[0]
    return context(spec, table, table.connectors[0], warehouse)


def test_rendered_slices_keep_their_own_pending_batches(sqlite_url: str, tmp_path: Path) -> None:
    for day in ("d1", "d2"):
        (tmp_path / day).mkdir()
        (tmp_path / day / "a.json").write_text('{"id": 1}\n')
    store = StateStore(sqlite_url)
    day1, day2 = files_ctx(tmp_path / "d1", "wh"), files_ctx(tmp_path / "d2", "wh")

    first = discover(store, day1, own_slice_only=True)  # day 1 planned, not ingested (crash)
    assert len(first.batch_ids) == 1
    # Day 2's run plans its own slice instead of taking over day 1's batch...
    second = discover(store, day2, own_slice_only=True)
    assert len(second.batch_ids) == 1 and second.batch_ids != first.batch_ids
    # ...and re-running day 1 returns its pending batch with the same plan.
    assert discover(store, day1, own_slice_only=True).batch_ids == first.batch_ids
    # Without templating every pending batch is the connector's, oldest first.
    assert discover(store, day2).batch_ids == first.batch_ids
    store.close()


def test_new_data_fingerprint_changes_with_the_data(sqlite_url: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    store = StateStore(sqlite_url)
    ctx = files_ctx(src, "wh")
    assert new_data_fingerprint(store, ctx) is None
    (src / "a.json").write_text('{"id": 1}\n')
    one = new_data_fingerprint(store, ctx)
    assert one is not None and new_data_fingerprint(store, ctx) == one
    (src / "b.json").write_text('{"id": 2}\n')
    assert new_data_fingerprint(store, ctx) not in (None, one)
    discover(store, ctx)  # planned: in flight, so no longer "new"
    assert new_data_fingerprint(store, ctx) is None
    store.close()
