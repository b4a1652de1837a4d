"""End to end on real Spark (local[2]): transports, formats, the Parquet sink, offsets,
end of input, start_after and error tolerance, with SQLite and PostgreSQL stores."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import checksum, pipeline, read_table, run, status

from airflow_connectors.engine.batch import BatchFailed
from airflow_connectors.state.store import ConnectorRef, StateStore


def datagen_table(seed: int = 7, limit: int = 10_000, **conn: Any) -> dict[str, Any]:
    return {
        "columns": {
            "id": "BIGINT NOT NULL",
            "score": "INT",
            "price": "DOUBLE",
            "tag": "VARCHAR",
            "day": "DATE",
        },
        "connectors": [
            {
                "name": "gen",
                "transport": {
                    "name": "datagen",
                    "config": {
                        "seed": seed,
                        "plan": [
                            {
                                "limit": limit,
                                "fields": {
                                    "score": {"strategy": "uniform", "range": [10, 20]},
                                    "price": {"strategy": "uniform", "range": [1.5, 2.5]},
                                    "tag": {"values": ["a", "b", "c"]},
                                },
                            }
                        ],
                    },
                },
                **conn,
            }
        ],
    }


def test_datagen_lands_exactly_limit_rows_and_is_deterministic(
    spark: Any, store_url: str, tmp_path: Path
) -> None:
    wh = str(tmp_path / "wh")
    spec = pipeline({"numbers": datagen_table(max_batch_size=3000)})
    report = run(spec, store_url, wh, spark)
    data = read_table(wh, "p", "numbers")
    assert data.num_rows == 10_000
    assert report.connectors["numbers.gen"].batches == 4  # 3000 + 3000 + 3000 + 1000
    assert sorted(data.column("id").to_pylist()) == list(range(10_000))
    scores = data.column("score").to_pylist()
    assert min(scores) >= 10 and max(scores) < 20 and len(set(scores)) == 10
    assert all(1.5 <= p < 2.5 for p in data.column("price").to_pylist())
    assert set(data.column("tag").to_pylist()) == {"a", "b", "c"}
    st = status(store_url, "p", "numbers", "gen")
    assert (
        st.end_of_input and st.buffered_records == 0 and st.total_records == 10_000 and st.finished
    )
    # Same seed -> same rows, even planned into different batches; another seed differs.
    same = str(tmp_path / "same")
    run(pipeline({"numbers": datagen_table()}), f"sqlite:///{tmp_path / 's2.db'}", same, spark)
    other = str(tmp_path / "other")
    run(
        pipeline({"numbers": datagen_table(seed=8)}),
        f"sqlite:///{tmp_path / 's3.db'}",
        other,
        spark,
    )
    assert checksum(read_table(same, "p", "numbers"), "id") == checksum(data, "id")
    assert checksum(read_table(other, "p", "numbers"), "id") != checksum(data, "id")
    # Finished: another run plans nothing and never asks for Spark.
    again = run(spec, store_url, wh, _no_spark())
    assert again.batches == 0 and not again.spark_started


class _no_spark:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"Spark was used ({name}) although nothing was new")


def write_jsonl(path: Path, ids: range) -> None:
    path.write_text(
        "".join(json.dumps({"id": i, "name": f"n{i}", "amount": i / 4}) + "\n" for i in ids)
    )


FILE_COLUMNS = {"id": "BIGINT NOT NULL", "name": "VARCHAR", "amount": "DOUBLE"}


def files_table(path: str, fmt: dict[str, Any], **transport: Any) -> dict[str, Any]:
    return {
        "columns": FILE_COLUMNS,
        "connectors": [
            {
                "name": "files",
                "transport": {
                    "name": "file_input",
                    "config": {"path": path, "min_file_age": 0, **transport},
                },
                "format": fmt,
            }
        ],
    }


@pytest.mark.parametrize("kind", ["jsonl", "csv", "parquet"])
def test_file_input_incremental(spark: Any, store_url: str, tmp_path: Path, kind: str) -> None:
    src = tmp_path / "in"
    src.mkdir()

    def add(name: str, ids: range) -> None:
        if kind == "jsonl":
            write_jsonl(src / f"{name}.json", ids)
        elif kind == "csv":
            (src / f"{name}.csv").write_text(
                "id,name,amount\n" + "".join(f"{i},n{i},{i / 4}\n" for i in ids)
            )
        else:
            pq.write_table(
                pa.table(
                    {
                        "amount": [i / 4 for i in ids],
                        "id": list(ids),
                        "name": [f"n{i}" for i in ids],
                    }
                ),
                src / f"{name}.parquet",
            )

    fmt = {
        "jsonl": {"name": "json", "config": {"update_format": "raw"}},
        "csv": {"name": "csv", "config": {"headers": True}},
        "parquet": {"name": "parquet"},
    }[kind]
    spec = pipeline({"t": files_table(str(src), fmt)})
    wh = str(tmp_path / "wh")
    add("a", range(0, 1000))
    add("b", range(1000, 1500))
    run(spec, store_url, wh, spark)
    data = read_table(wh, "p", "t")
    assert sorted(data.column("id").to_pylist()) == list(range(1500))
    assert data.sort_by("id").slice(1001, 1).to_pylist() == [
        {"id": 1001, "name": "n1001", "amount": 250.25}
    ]
    st = status(store_url, "p", "t", "files")
    assert st.end_of_input and st.total_records == 1500
    add("c", range(1500, 1700))
    assert not _eoi_after_discovery(spec, store_url, wh)  # a new file reopens the input
    report = run(spec, store_url, wh, spark)
    assert report.connectors["t.files"].records == 200
    data = read_table(wh, "p", "t")
    assert data.num_rows == 1700 and len(set(data.column("id").to_pylist())) == 1700
    assert status(store_url, "p", "t", "files").end_of_input


def _eoi_after_discovery(spec: Any, store_url: str, wh: str) -> bool:
    from airflow_connectors.engine.discovery import discover
    from airflow_connectors.engine.runner import EmbeddedRunner
    from airflow_connectors.settings import Settings

    store = StateStore(store_url)
    runner = EmbeddedRunner(spec, Settings(state_store_url=store_url, warehouse=wh), store=store)
    table, conn = spec.connectors()[0]
    found = discover(store, runner.context(table, conn))
    st = store.status(ConnectorRef("p", table.name, conn.name))
    store.close()
    assert found.batch_ids
    return bool(st and st.end_of_input)


def test_file_input_follow_reads_appended_lines(
    spark: Any, sqlite_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "events.json"
    write_jsonl(log, range(0, 10))
    spec = pipeline(
        {
            "t": files_table(
                str(log),
                {"name": "json", "config": {"update_format": "raw", "lines": "single"}},
                follow=True,
            )
        }
    )
    wh = str(tmp_path / "wh")
    run(spec, sqlite_url, wh, spark)
    assert read_table(wh, "p", "t").num_rows == 10
    with log.open("a") as fh:
        fh.write("".join(json.dumps({"id": i}) + "\n" for i in range(10, 15)))
        fh.write('{"id": 15, "na')  # a writer is in the middle of this line
    run(spec, sqlite_url, wh, spark)
    assert sorted(read_table(wh, "p", "t").column("id").to_pylist()) == list(range(15))
    with log.open("a") as fh:
        fh.write('me": "late"}\n')
    run(spec, sqlite_url, wh, spark)
    data = read_table(wh, "p", "t")
    assert sorted(data.column("id").to_pylist()) == list(range(16))
    assert data.filter(pa.compute.equal(data.column("id"), 15)).column("name").to_pylist() == [
        "late"
    ]
    st = status(sqlite_url, "p", "t", "files")
    assert not st.end_of_input and st.total_records == 16  # follow never ends the input


def test_url_input_all_rows_and_end_of_input(
    spark: Any, store_url: str, tmp_path: Path, http_server: Any
) -> None:
    body = "".join(
        json.dumps({"insert": {"part": i, "vendor": i % 7, "price": i * 10}}) + "\n"
        for i in range(5000)
    ).encode()
    http_server.files["/price.json"] = body
    sql = (
        "CREATE TABLE price (part BIGINT NOT NULL, vendor BIGINT NOT NULL, price INTEGER) WITH ('connectors' = '["
        '{{"labels": "price.backfill", "transport": {{"name": "url_input", "config": {{"path": "{}"}}}}, "format": {{"name": "json"}}}}'
        "]')".format(http_server.url("/price.json"))
    )
    from airflow_connectors.catalog import parse_pipeline

    spec = parse_pipeline({"pipeline": "tutorial", "sql": sql})
    wh = str(tmp_path / "wh")
    run(spec, store_url, wh, spark)
    data = read_table(wh, "tutorial", "price")
    assert data.num_rows == 5000 and sum(data.column("price").to_pylist()) == sum(
        i * 10 for i in range(5000)
    )
    st = status(store_url, "tutorial", "price", "unnamed-0")
    assert st.end_of_input and st.finished and st.total_bytes == len(body)
    assert run(spec, store_url, wh, _no_spark()).batches == 0


def test_url_input_resumes_with_range(http_server: Any) -> None:
    from airflow_connectors.spec import TableSpec
    from airflow_connectors.transports import WorkItem
    from airflow_connectors.transports.url_input import UrlInputConfig, UrlInputTransport

    http_server.files["/r.txt"] = b"0123456789" * 100
    t = UrlInputTransport(
        UrlInputConfig(path=http_server.url("/r.txt")), TableSpec(name="t", columns=())
    )
    assert b"".join(t.read(WorkItem(key=t.config.path, start=995))) == b"56789"
    assert http_server.requests[-1]["range"] == "bytes=995-"
    assert b"".join(t.read(WorkItem(key=t.config.path, start=1000))) == b""  # 416: nothing left
    http_server.files["/missing"] = None  # type: ignore[assignment]
    bad = UrlInputTransport(
        UrlInputConfig(path=http_server.url("/nope")), TableSpec(name="t", columns=())
    )
    with pytest.raises(OSError, match="answered HTTP 404"):
        list(bad.read(WorkItem(key=bad.config.path)))


def test_start_after_waits_for_labelled_connectors_only(
    spark: Any, store_url: str, tmp_path: Path
) -> None:
    def gen(name: str, limit: int, **extra: Any) -> dict[str, Any]:
        return {
            "name": name,
            "max_batch_size": 1000,
            "transport": {"name": "datagen", "config": {"plan": [{"limit": limit}]}},
            **extra,
        }

    spec = pipeline(
        {
            "t": {
                "columns": {"id": "BIGINT"},
                "connectors": [
                    gen("backfill1", 3000, labels=["backfill"]),
                    gen("backfill2", 2000, labels="backfill"),
                    gen("live", 1000, start_after="backfill"),
                    gen("unrelated", 3000),
                ],
            }
        }
    )
    wh = str(tmp_path / "wh")
    report = run(spec, store_url, wh, spark)
    assert {k: v.records for k, v in report.connectors.items()} == {
        "t.backfill1": 3000,
        "t.backfill2": 2000,
        "t.live": 1000,
        "t.unrelated": 3000,
    }
    store = StateStore(store_url)
    commits = {
        c: [b.committed_at for b in store.batches(ConnectorRef("p", "t", c))]
        for c in ("backfill1", "backfill2", "live", "unrelated")
    }
    finished = max(
        store.status(ConnectorRef("p", "t", c)).finished_at for c in ("backfill1", "backfill2")
    )  # type: ignore[union-attr]
    store.close()
    assert min(commits["live"]) > finished > max(commits["backfill1"] + commits["backfill2"])
    # The unrelated connector ran alongside the backfill, not after it.
    assert min(commits["unrelated"]) < max(commits["backfill1"])
    assert read_table(wh, "p", "t").num_rows == 9000


def test_paused_connector_and_paused_pipeline_do_nothing(
    spark: Any, sqlite_url: str, tmp_path: Path
) -> None:
    wh = str(tmp_path / "wh")
    spec = pipeline(
        {
            "t": {
                "columns": {"id": "BIGINT"},
                "connectors": [
                    {
                        "name": "c1",
                        "paused": True,
                        "transport": {"name": "datagen", "config": {"plan": [{"limit": 10}]}},
                    },
                    {
                        "name": "c2",
                        "transport": {"name": "datagen", "config": {"plan": [{"limit": 20}]}},
                    },
                ],
            }
        }
    )
    store = StateStore(sqlite_url)
    store.set_pipeline_paused("p", True)
    assert run(spec, sqlite_url, wh, _no_spark()).batches == 0
    store.set_pipeline_paused("p", False)
    report = run(spec, sqlite_url, wh, spark)
    assert (report.connectors["t.c1"].status, report.connectors["t.c2"].records) == ("paused", 20)
    store.set_connector_paused(ConnectorRef("p", "t", "c1"), False)  # Feldera's "start c1"
    assert run(spec, sqlite_url, wh, spark).connectors["t.c1"].records == 10
    store.close()
    assert read_table(wh, "p", "t").num_rows == 30


def test_tolerance_none_fails_naming_object_and_record(
    spark: Any, sqlite_url: str, tmp_path: Path
) -> None:
    src = tmp_path / "bad.json"
    src.write_text('{"id": 1}\n{"id": 2}\n{"id": "three"}\n')
    spec = pipeline(
        {"t": files_table(str(src), {"name": "json", "config": {"update_format": "raw"}})}
    )
    wh = str(tmp_path / "wh")
    with pytest.raises(BatchFailed) as exc:
        run(spec, sqlite_url, wh, spark)
    message = str(exc.value)
    assert (
        f"record 3 (line 3) of {src}" in message
        and "p.t.files" in message
        and "errors.tolerance: all" in message
    )
    st = status(sqlite_url, "p", "t", "files")
    assert (
        st.state == "FAILED"
        and st.fatal_error == message
        and st.total_records == 0
        and st.buffered_records == 1
        # The planned batch's bytes (Feldera's buffered_bytes): the whole file.
        and st.buffered_bytes == len('{"id": 1}\n{"id": 2}\n{"id": "three"}\n')
    )
    assert read_table(wh, "p", "t").num_rows == 0  # nothing of the failed batch is visible
    # Fix the file: the same planned batch re-runs and lands everything.
    src.write_text('{"id": 1}\n{"id": 2}\n{"id": 3}\n')
    run(spec, sqlite_url, wh, spark)
    assert sorted(read_table(wh, "p", "t").column("id").to_pylist()) == [1, 2, 3]
    assert status(sqlite_url, "p", "t", "files").state == "RUNNING"


def test_tolerance_all_writes_dead_letters(spark: Any, sqlite_url: str, tmp_path: Path) -> None:
    src = tmp_path / "mixed.json"
    src.write_text(
        "".join(
            json.dumps({"id": i}) + "\n" if i % 10 else f'{{"id": "x{i}"}}\n' for i in range(1, 101)
        )
    )
    table = files_table(str(src), {"name": "json", "config": {"update_format": "raw"}})
    table["connectors"][0]["errors"] = {"tolerance": "all"}
    wh = str(tmp_path / "wh")
    run(pipeline({"t": table}), sqlite_url, wh, spark)
    assert read_table(wh, "p", "t").num_rows == 90
    dead = read_table(wh, "p", "t__errors").sort_by("record_number")
    assert dead.num_rows == 10
    first = dead.slice(0, 1).to_pylist()[0]
    assert (first["connector"], first["source_key"], first["record_number"], first["raw_text"]) == (
        "files",
        str(src),
        10,
        '{"id": "x10"}',
    )
    assert first["error"]
    st = status(sqlite_url, "p", "t", "files")
    assert (st.num_parse_errors, st.total_records, len(st.parse_errors)) == (10, 90, 10)


def test_table_readable_by_spark_and_duckdb(spark: Any, sqlite_url: str, tmp_path: Path) -> None:
    wh = str(tmp_path / "wh")
    run(pipeline({"numbers": datagen_table(limit=500)}), sqlite_url, wh, spark)
    path = Path(wh) / "p" / "numbers"
    assert spark.read.parquet(str(path)).count() == 500
    assert duckdb.sql(
        f"SELECT count(*), count(DISTINCT id) FROM read_parquet('{path}/*.parquet')"
    ).fetchall() == [(500, 500)]
    assert not (Path(wh) / "p" / "_staging").exists()


def test_transports_as_spark_data_sources(spark: Any, tmp_path: Path) -> None:
    write_jsonl(tmp_path / "a.json", range(0, 30))
    write_jsonl(tmp_path / "b.json", range(30, 50))
    df = (
        spark.read.format("file_input")
        .schema("id BIGINT, name STRING")
        .option("path", str(tmp_path / "*.json"))
        .option("min_file_age", "0")  # just written
        .option("format", "json")
        .option("format.update_format", "raw")
        .load()
    )
    assert df.count() == 50 and df.where("id = 42").first().name == "n42"
    gen = (
        spark.read.format("datagen")
        .schema("id BIGINT, v INT")
        .option("config", json.dumps({"plan": [{"limit": 25}]}))
        .load()
    )
    assert sorted(r.id for r in gen.collect()) == list(range(25))
    # Read options are checked as a connector's configs are: field paths, did-you-mean.
    with pytest.raises(Exception, match=r"transport\.config\.pathh: unknown field 'pathh'"):
        spark.read.format("file_input").schema("id BIGINT").option("pathh", "/x").load().count()
    # A plain read has no dead-letter table: tolerating bad records would lose them.
    with pytest.raises(Exception, match="no dead-letter table"):
        (
            spark.read.format("file_input")
            .schema("id BIGINT, name STRING")
            .option("path", str(tmp_path / "*.json"))
            .option("format", "json")
            .option("errors.tolerance", "all")
            .load()
            .count()
        )


def test_invalid_utf8_and_null_records_are_dead_letters_never_stored(
    spark: Any, sqlite_url: str, tmp_path: Path
) -> None:
    src = tmp_path / "dirty.json"
    src.write_bytes(b'null\n{"id": 1, "name": "caf\xe9"}\n{"id": 2, "name": "ok"}\n')
    table = files_table(str(src), {"name": "json", "config": {"update_format": "raw"}})
    table["connectors"][0]["errors"] = {"tolerance": "all"}
    wh = str(tmp_path / "wh")
    run(pipeline({"t": table}), sqlite_url, wh, spark)
    assert read_table(wh, "p", "t").to_pylist() == [{"id": 2, "name": "ok", "amount": None}]
    dead = read_table(wh, "p", "t__errors").sort_by("record_number").to_pylist()
    assert [(d["record_number"], d["raw_text"]) for d in dead] == [
        (1, "null"),
        (2, '{"id": 1, "name": "caf\\xe9"}'),
    ]
    assert "invalid UTF-8" in dead[1]["error"]
    assert status(sqlite_url, "p", "t", "files").num_parse_errors == 2

    # Under errors.tolerance none the batch fails naming the object and the record.
    strict = files_table(str(src), {"name": "json", "config": {"update_format": "raw"}})
    with pytest.raises(BatchFailed) as exc:
        run(
            pipeline({"t": strict}),
            f"sqlite:///{tmp_path / 'strict.db'}",
            str(tmp_path / "w2"),
            spark,
        )
    assert f"record 1 (line 1) of {src}" in str(exc.value)
