"""``schema_evolution`` end to end on real Spark (local) and the Parquet sink: JSON files
whose fields appear, disappear and change type across batches, under each mode, with the
exact rows and columns a reader sees; the schema versions a batch stores; and a SIGKILL
of the ingest job between the staging of the widened batch and its commit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import pipeline, read_table, run, status

from airflow_connectors.engine.batch import BatchFailed, run_batch
from airflow_connectors.engine.discovery import context, discover
from airflow_connectors.state.store import StateStore
from airflow_connectors.testing.jobs import kill, start_job, wait_for

COLUMNS = {"id": "BIGINT NOT NULL", "name": "VARCHAR"}

#: One file per batch: fields appear (x, y), disappear (x) and change type (x, name).
BATCHES: list[list[dict[str, Any]]] = [
    [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}],
    [{"id": 3, "name": "c", "x": 5}, {"id": 4, "name": "d", "x": 6, "y": "t"}],
    [{"id": 5, "name": "e"}, {"id": 6, "name": "f", "x": "seven"}, {"id": 7, "name": 8}],
]


def table(src: Path, mode: str | None, **more: Any) -> dict[str, Any]:
    sink = more.pop("sink", None)
    return {
        "columns": COLUMNS,
        **({"schema_evolution": mode} if mode else {}),
        **({"sink": sink} if sink else {}),
        "connectors": [
            {
                "name": "files",
                "transport": {
                    "name": "file_input",
                    "config": {"path": str(src), "min_file_age": 0},
                },
                "format": {"name": "json", "config": {"update_format": "raw"}},
                **more,
            }
        ],
    }


def write(src: Path, n: int, records: list[dict[str, Any]]) -> Path:
    src.mkdir(parents=True, exist_ok=True)
    path = src / f"b{n}.json"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def rows(data: pa.Table) -> list[dict[str, Any]]:
    return sorted(data.to_pylist(), key=lambda r: r["id"])


def versions(store_url: str, table_name: str = "t") -> list[list[tuple[str, str]]]:
    store = StateStore(store_url)
    try:
        return [
            [(c.name, c.type) for c in v.columns] for v in store.schema_versions("p", table_name)
        ]
    finally:
        store.close()


def test_none_ignores_new_fields_as_before(spark: Any, tmp_path: Path) -> None:
    url, wh, src = f"sqlite:///{tmp_path / 's.db'}", str(tmp_path / "wh"), tmp_path / "src"
    # Declared columns evolve `none` by default: the same as saying it.
    spec = pipeline({"t": table(src, None, errors={"tolerance": "all"})})
    assert spec.tables[0].evolution == "none"
    for n, records in enumerate(BATCHES):
        write(src, n, records)
        run(spec, url, wh, spark)
    data = read_table(wh, "p", "t")
    assert data.column_names == ["id", "name"]
    # name 8 does not fit VARCHAR: a dead letter, as always.
    assert rows(data) == [{"id": i, "name": n} for i, n in zip(range(1, 7), "abcdef", strict=True)]
    assert status(url, "p", "t", "files").num_parse_errors == 1
    assert versions(url) == []


def test_rescue_keeps_unknown_fields_and_misfits_as_json(spark: Any, tmp_path: Path) -> None:
    url, wh, src = f"sqlite:///{tmp_path / 's.db'}", str(tmp_path / "wh"), tmp_path / "src"
    spec = pipeline({"t": table(src, "rescue")})  # errors.tolerance none: nothing is bad
    for n, records in enumerate(BATCHES):
        write(src, n, records)
        run(spec, url, wh, spark)
    data = read_table(wh, "p", "t")
    assert data.column_names == ["id", "name", "_rescued_data"]
    got = rows(data)
    assert [(r["id"], r["name"]) for r in got] == [
        (1, "a"),
        (2, "b"),
        (3, "c"),
        (4, "d"),
        (5, "e"),
        (6, "f"),
        (7, None),  # 8 is no text: rescued, the column is NULL
    ]
    rescued = [None if r["_rescued_data"] is None else json.loads(r["_rescued_data"]) for r in got]
    assert rescued == [None, None, {"x": 5}, {"x": 6, "y": "t"}, None, {"x": "seven"}, {"name": 8}]
    st = status(url, "p", "t", "files")
    assert st.total_records == 7 and st.num_parse_errors == 0
    assert versions(url) == []  # rescue never changes the schema


def test_fail_on_new_columns_fails_the_batch_naming_file_and_fields(
    spark: Any, tmp_path: Path
) -> None:
    url, wh, src = f"sqlite:///{tmp_path / 's.db'}", str(tmp_path / "wh"), tmp_path / "src"
    # errors.tolerance all does not let new fields pass: no record is bad.
    spec = pipeline({"t": table(src, "fail_on_new_columns", errors={"tolerance": "all"})})
    write(src, 0, BATCHES[0])
    run(spec, url, wh, spark)
    second = write(src, 1, BATCHES[1])
    with pytest.raises(BatchFailed) as exc:
        run(spec, url, wh, spark)
    message = str(exc.value)
    assert "\n" not in message
    assert "connector p.t.files" in message and str(second) in message
    assert "new field(s) x, y" in message and "fail_on_new_columns" in message
    assert rows(read_table(wh, "p", "t")) == [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]
    st = status(url, "p", "t", "files")
    assert st.total_records == 2 and st.fatal_error == message


def test_add_new_columns_widens_the_table_batch_by_batch(spark: Any, tmp_path: Path) -> None:
    url, wh, src = f"sqlite:///{tmp_path / 's.db'}", str(tmp_path / "wh"), tmp_path / "src"
    spec = pipeline({"t": table(src, "add_new_columns", errors={"tolerance": "all"})})
    write(src, 0, BATCHES[0])
    run(spec, url, wh, spark)
    assert read_table(wh, "p", "t").column_names == ["id", "name"]
    assert versions(url) == []  # nothing added yet: the declared columns

    write(src, 1, BATCHES[1])
    run(spec, url, wh, spark)
    declared = [("id", "BIGINT"), ("name", "VARCHAR")]
    widened = [*declared, ("x", "BIGINT"), ("y", "VARCHAR")]
    assert versions(url) == [declared, widened]
    # The first batch's file lacks x and y: they read as null there.
    parts = sorted((Path(wh) / "p" / "t").glob("*.parquet"))
    assert [pq.read_schema(p).names for p in parts] == [["id", "name"], ["id", "name", "x", "y"]]

    write(src, 2, BATCHES[2])  # x disappears, then holds text; name holds a number
    run(spec, url, wh, spark)
    assert versions(url) == [declared, widened]  # nothing new: no version
    data = read_table(wh, "p", "t")
    assert data.column_names == ["id", "name", "x", "y"]
    assert data.schema.field("x").type == pa.int64()
    assert rows(data) == [
        {"id": 1, "name": "a", "x": None, "y": None},
        {"id": 2, "name": "b", "x": None, "y": None},
        {"id": 3, "name": "c", "x": 5, "y": None},
        {"id": 4, "name": "d", "x": 6, "y": "t"},
        {"id": 5, "name": "e", "x": None, "y": None},
    ]
    # "seven" does not fit BIGINT and 8 does not fit VARCHAR: dead letters, as for any
    # declared column.
    errors = read_table(wh, "p", "t__errors")
    assert sorted(errors.column("record_number").to_pylist()) == [2, 3]
    assert st_records(url) == (5, 2)


def st_records(url: str) -> tuple[int, int]:
    st = status(url, "p", "t", "files")
    return st.total_records, st.num_parse_errors


def test_add_new_columns_conflicting_types_in_one_batch_fail_clearly(
    spark: Any, tmp_path: Path
) -> None:
    url, wh, src = f"sqlite:///{tmp_path / 's.db'}", str(tmp_path / "wh"), tmp_path / "src"
    write(src, 0, [{"id": 1, "z": 1, "r": 1}])
    write(src, 1, [{"id": 2, "z": "one", "r": 2.5}])
    spec = pipeline({"t": table(src, "add_new_columns")})
    with pytest.raises(BatchFailed) as exc:
        run(spec, url, wh, spark)
    message = str(exc.value)
    assert "new field 'z' holds BIGINT values in" in message and "b0.json" in message
    assert "VARCHAR values in" in message and "b1.json" in message
    assert "schema_hints" in message and "\n" not in message
    assert read_table(wh, "p", "t").num_rows == 0 and versions(url) == []


def test_kill_between_widened_write_and_commit_reruns_exactly(spark: Any, tmp_path: Path) -> None:
    url, src = f"sqlite:///{tmp_path / 's.db'}", tmp_path / "src"
    write(src, 0, BATCHES[1])
    spec = pipeline({"t": table(src, "add_new_columns")})
    t = spec.tables[0]
    ctx = context(spec, t, t.connectors[0], str(tmp_path / "wh"))
    store = StateStore(url)
    try:
        (batch_id,) = discover(store, ctx).batch_ids
    finally:
        store.close()
    marks = tmp_path / "marks"
    marks.mkdir()
    proc = start_job([batch_id], url, marks, "after_widened_write", spark_master="local[1]")
    try:
        wait_for(marks / "after_widened_write", proc)
    finally:
        kill(proc)
    # Staged twice (narrow, then widened), committed never: no rows, no version.
    assert read_table(ctx.warehouse, "p", "t").num_rows == 0
    assert versions(url) == [] and st_records(url) == (0, 0)

    store = StateStore(url)
    try:
        assert run_batch(store, batch_id, lambda: spark).committed
        assert not run_batch(store, batch_id, lambda: spark).committed  # a no-op now
    finally:
        store.close()
    assert rows(read_table(ctx.warehouse, "p", "t")) == [
        {"id": 3, "name": "c", "x": 5, "y": None},
        {"id": 4, "name": "d", "x": 6, "y": "t"},
    ]
    declared = [("id", "BIGINT"), ("name", "VARCHAR")]
    assert versions(url) == [declared, [*declared, ("x", "BIGINT"), ("y", "VARCHAR")]]
    assert st_records(url) == (2, 0)
    staging = Path(ctx.warehouse) / "p" / "_staging"
    assert not staging.exists() or not [p for p in staging.rglob("*") if p.is_file()]


def test_inferred_table_evolves_from_its_inferred_version(spark: Any, tmp_path: Path) -> None:
    """Columns omitted: the first discovery infers version 1, a later batch adds version 2
    (``add_new_columns`` is the default of an inferred table)."""
    url, wh, src = f"sqlite:///{tmp_path / 's.db'}", str(tmp_path / "wh"), tmp_path / "src"
    doc = table(src, None)
    del doc["columns"]
    spec = pipeline({"t": doc})
    write(src, 0, BATCHES[0])
    run(spec, url, wh, spark)
    inferred = [("id", "BIGINT"), ("name", "VARCHAR")]
    assert versions(url) == [inferred]
    write(src, 1, BATCHES[1])
    run(spec, url, wh, spark)
    assert versions(url) == [inferred, [*inferred, ("x", "BIGINT"), ("y", "VARCHAR")]]
    assert rows(read_table(wh, "p", "t")) == [
        {"id": 1, "name": "a", "x": None, "y": None},
        {"id": 2, "name": "b", "x": None, "y": None},
        {"id": 3, "name": "c", "x": 5, "y": None},
        {"id": 4, "name": "d", "x": 6, "y": "t"},
    ]


def test_add_new_columns_refuses_a_field_of_objects(spark: Any, tmp_path: Path) -> None:
    url, wh, src = f"sqlite:///{tmp_path / 's.db'}", str(tmp_path / "wh"), tmp_path / "src"
    path = write(src, 0, [{"id": 1, "name": "a", "o": {"k": 1}}])
    with pytest.raises(BatchFailed) as exc:
        run(pipeline({"t": table(src, "add_new_columns")}), url, wh, spark)
    message = str(exc.value)
    assert "new field 'o' holds values of type struct<k: int64>" in message
    assert str(path) in message and "schema_evolution: rescue" in message
    assert read_table(wh, "p", "t").num_rows == 0 and versions(url) == []
