"""OpenLineage of connector tasks: the dataset names per transport and sink (no Airflow
run), the ``connector://`` asset scheme in Airflow, and the events a real ``dag.test()``
run emits through the OpenLineage provider's file transport."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import DAGS, task_states, write_pipeline
from test_dags import COLUMNS, files_connector, json_files

from airflow_connectors.airflow.lineage import (
    LINEAGE_ATTRIBUTE,
    DatasetFacts,
    TaskLineage,
    connector_dataset,
    errors_dataset,
    operator_lineage,
    sanitize_uri,
    source_datasets,
    table_dataset,
)
from airflow_connectors.catalog import parse_pipeline
from airflow_connectors.spec.datasets import LineageDataset, storage_dataset
from airflow_connectors.spec.models import ConnectorSpec, TableSpec
from airflow_connectors.state.store import StateStore
from airflow_connectors.testing.s3server import ACCESS_KEY, REGION, SECRET_KEY, S3Server

pytestmark = pytest.mark.airflow_server

PG_PASSWORD = "pg-Lineage-pw-77"


def connector_of(
    transport: str, config: dict[str, Any], **table: Any
) -> tuple[TableSpec, ConnectorSpec]:
    """The table ``t`` of pipeline ``p`` with one connector ``c`` reading ``transport``."""
    conn: dict[str, Any] = {"name": "c", "transport": {"name": transport, "config": config}}
    if transport not in ("datagen", "postgres_input", "delta_table_input", "iceberg_input"):
        conn["format"] = {"name": "json", "config": {"update_format": "raw"}}
    spec = parse_pipeline(
        {
            "pipeline": "p",
            "tables": {"t": {"columns": {"id": "BIGINT NOT NULL"}, **table, "connectors": [conn]}},
        }
    )
    [t] = spec.tables
    return t, t.connectors[0]


def fields_of(dataset: dict[str, Any]) -> list[tuple[str, str]]:
    """``(name, type)`` of a serialized dataset's schema facet."""
    return [(f["name"], f["type"]) for f in dataset["facets"]["schema"]["fields"]]


def names(transport: str, config: dict[str, Any]) -> list[tuple[str, str]]:
    table, connector = connector_of(transport, config)
    return [(d.namespace, d.name) for d in source_datasets("p", table, connector)]


# --- naming, without Airflow runs -----------------------------------------------------


def test_storage_locations_follow_the_naming_spec(tmp_path: Path) -> None:
    assert storage_dataset(f"{tmp_path}/wh/") == LineageDataset("file", f"{tmp_path}/wh")
    assert storage_dataset(f"file://{tmp_path}/wh") == LineageDataset("file", f"{tmp_path}/wh")
    assert storage_dataset("file://nas1/data/t") == LineageDataset("file://nas1", "/data/t")
    assert storage_dataset("s3://lake/wh/p/t/") == LineageDataset("s3://lake", "wh/p/t")
    assert storage_dataset("s3a://lake") == LineageDataset("s3://lake", "/")
    assert storage_dataset("gs://bucket/a/b") == LineageDataset("gs://bucket", "a/b")
    azure = "abfss://lake@acct.dfs.core.windows.net/wh/p/t"
    assert storage_dataset(azure) == LineageDataset(
        "abfss://lake@acct.dfs.core.windows.net", "wh/p/t"
    )
    assert storage_dataset("az://lake/wh/p/t") == LineageDataset("az://lake", "wh/p/t")
    relative = storage_dataset("wh/t")
    assert relative == LineageDataset("file", str(Path("wh/t").resolve()))


def test_sources_per_transport(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "src"
    src.mkdir()
    assert names("file_input", {"path": str(src)}) == [("file", str(src))]
    assert names("file_input", {"path": f"{src}/2026-*/*.json"}) == [("file", str(src))]
    assert names("file_input", {"path": f"file://{src}/a.json"}) == [("file", f"{src}/a.json")]
    s3 = {"bucket_name": "landing", "aws_access_key_id": ACCESS_KEY}
    s3["aws_secret_access_key"] = SECRET_KEY
    assert names("s3_input", {**s3, "prefix": "orders/"}) == [("s3://landing", "orders")]
    assert names("s3_input", {**s3, "key": "orders/a.json"}) == [("s3://landing", "orders/a.json")]
    assert names("s3_input", {**s3, "prefix": ""}) == [("s3://landing", "/")]
    # Listing sources name what they list.
    gcs = {"bucket_name": "landing", "prefix": "orders/"}
    assert names("gcs_input", gcs) == [("gs://landing", "orders")]
    azure = {"container": "landing", "prefix": "orders/", "account_name": "acct"}
    assert names("azure_blob_input", {**azure, "account_key": "a2V5"}) == [
        ("wasbs://landing@acct.blob.core.windows.net", "orders")
    ]
    assert names(
        "url_input", {"path": "https://reader:hunter22@api.example.com/v1/x?token=t0k3n"}
    ) == [("https://api.example.com:443", "/v1/x")]
    assert names("url_input", {"path": "http://127.0.0.1:8123/data.json"}) == [
        ("http://127.0.0.1:8123", "/data.json")
    ]
    pg = f"postgresql://reader:{PG_PASSWORD}@127.0.0.1/shop"
    query = "SELECT o.id FROM sales.orders o JOIN customers c ON c.id = o.customer_id"
    assert sorted(names("postgres_input", {"uri": pg, "query": query})) == [
        ("postgres://127.0.0.1:5432", "shop.public.customers"),
        ("postgres://127.0.0.1:5432", "shop.sales.orders"),
    ]
    # A connection id resolves like the transport resolves it (here AIRFLOW_CONN_<ID>).
    monkeypatch.setenv(
        "AIRFLOW_CONN_SHOP_DB",
        json.dumps(
            {
                "conn_type": "postgres",
                "host": "db.internal",
                "port": 6432,
                "login": "u",
                "password": PG_PASSWORD,
                "schema": "shop",
            }
        ),
    )
    assert names(
        "postgres_input", {"postgres_conn_id": "shop_db", "query": "SELECT id FROM orders"}
    ) == [("postgres://db.internal:6432", "shop.public.orders")]
    # url_input's http_conn_id: the URL read, the connection's base URL joined to path.
    monkeypatch.setenv(
        "AIRFLOW_CONN_PRICES_API",
        json.dumps(
            {
                "conn_type": "http",
                "host": "prices.example.com",
                "schema": "https",
                "login": "u",
                "password": "http-pw-secret",
                "extra": {"X-API-Key": "k3y-secret"},
            }
        ),
    )
    url = {"http_conn_id": "prices_api", "path": "/v2/prices.json"}
    assert names("url_input", url) == [("https://prices.example.com:443", "/v2/prices.json")]
    nats = {"server_url": "nats://127.0.0.1:4222", "auth": {"token": "nats-t0ken-secret"}}
    assert names("nats_input", {"connection_config": nats, "stream_name": "orders"}) == [
        ("nats://127.0.0.1:4222", "orders")
    ]
    assert names("delta_table_input", {"uri": "s3://lake/tables/orders", "mode": "snapshot"}) == [
        ("s3://lake", "tables/orders")
    ]
    assert names("datagen", {"plan": [{"limit": 3}]}) == [("connector://p", "t/c/datagen")]


def test_descriptions_carry_no_secret() -> None:
    configs = {
        "s3_input": {
            "bucket_name": "landing",
            "prefix": "o/",
            "aws_access_key_id": ACCESS_KEY,
            "aws_secret_access_key": SECRET_KEY,
        },
        "url_input": {"path": "https://reader:hunter22@api.example.com/x?token=t0k3n"},
        "postgres_input": {
            "uri": f"postgresql://reader:{PG_PASSWORD}@127.0.0.1/shop",
            "query": "SELECT id FROM orders",
        },
        "nats_input": {
            "connection_config": {"server_url": "nats://u:natspw99@127.0.0.1:4222"},
            "stream_name": "orders",
        },
    }
    for transport, config in configs.items():
        table, connector = connector_of(transport, config)
        [d] = source_datasets("p", table, connector)
        text = json.dumps(d.__dict__)
        assert d.description and d.description.startswith(transport), d
        for secret in (SECRET_KEY, ACCESS_KEY, "hunter22", "t0k3n", PG_PASSWORD, "natspw99"):
            assert secret not in text, (transport, text)


def test_iceberg_source_is_named_by_its_storage_location(tmp_path: Path) -> None:
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    from airflow_connectors.sinks.iceberg import catalog_properties

    uri = f"sqlite:///{tmp_path / 'catalog.db'}"
    catalog = SqlCatalog("airflow_connectors", **catalog_properties(uri, str(tmp_path)))
    catalog.create_namespace_if_not_exists("ns")
    catalog.create_table(
        "ns.events",
        schema=pa.schema([pa.field("id", pa.int64())]),
        location=f"file://{tmp_path}/wh/ns/events",
    )
    catalog.engine.dispose()
    assert names("iceberg_input", {"table_name": "ns.events", "catalog_uri": uri}) == [
        ("file", f"{tmp_path}/wh/ns/events")
    ]
    # A catalog that cannot be read: the table as its catalog names it.
    missing = {"table_name": "ns.gone", "catalog_uri": uri}
    assert names("iceberg_input", missing) == [("iceberg://airflow_connectors", "ns.gone")]


def test_tables_per_sink_with_their_columns(tmp_path: Path) -> None:
    table, _ = connector_of("datagen", {"plan": [{"limit": 1}]})
    wh = tmp_path / "wh"
    parquet = table_dataset("p", table, str(wh))
    assert (parquet.namespace, parquet.name) == ("file", f"{wh}/p/t")
    assert parquet.fields == (("id", "BIGINT"),)
    assert table_dataset("p", table, "s3://lake/wh/").name == "wh/p/t"
    assert table_dataset("p", table, "s3://lake/wh/").namespace == "s3://lake"

    pg_sink = {
        "name": "postgres",
        "config": {"uri": f"postgresql://w:{PG_PASSWORD}@10.0.0.5:5433/dw", "table": "raw.events"},
    }
    pg_table, _ = connector_of("datagen", {"plan": [{"limit": 1}]}, sink=pg_sink)
    pg = table_dataset("p", pg_table, str(wh))
    assert (pg.namespace, pg.name) == ("postgres://10.0.0.5:5433", "dw.raw.events")
    assert PG_PASSWORD not in json.dumps(pg.__dict__)
    pg_errors = errors_dataset("p", pg_table, str(wh))
    assert (pg_errors.namespace, pg_errors.name) == (
        "postgres://10.0.0.5:5433",
        "dw.raw.events__errors",
    )

    delta_table, _ = connector_of("datagen", {"plan": [{"limit": 1}]}, sink={"name": "delta"})
    delta = table_dataset("p", delta_table, str(wh))
    assert (delta.namespace, delta.name) == ("file", f"{wh}/p/t")


def test_an_inferred_table_reports_its_latest_schema_version(tmp_path: Path) -> None:
    from airflow_connectors.state.schemas import SchemaColumn

    table = TableSpec.model_validate({"name": "t"})
    store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        assert table_dataset("p", table, str(tmp_path), store).fields == ()
        cols = [SchemaColumn("id", "BIGINT"), SchemaColumn("name", "VARCHAR")]
        store.add_schema_version("p", "t", cols, based_on=None, origin="test")
        store.add_schema_version(
            "p", "t", [*cols, SchemaColumn("_rescued_data", "VARCHAR")], based_on=1, origin="test"
        )
        fields = table_dataset("p", table, str(tmp_path), store).fields
        assert fields == (("id", "BIGINT"), ("name", "VARCHAR"), ("_rescued_data", "VARCHAR"))
    finally:
        store.close()


def test_statistics_of_committed_batches_and_their_dead_letters(tmp_path: Path) -> None:
    """Rows and source bytes of committed batches only (a planned one adds nothing); the
    records that failed to parse make the dead-letter table an output."""
    from airflow_connectors.airflow.lineage import batch_lineage
    from airflow_connectors.state.store import BatchPlan, ConnectorRef, ItemReceipt
    from airflow_connectors.transports import WorkItem

    table, connector = connector_of("datagen", {"plan": [{"limit": 20}]})
    wh = str(tmp_path / "wh")

    def plan(key: str) -> BatchPlan:
        return BatchPlan(
            pipeline="p",
            table=table.model_copy(update={"connectors": ()}),
            connector=connector,
            warehouse=wh,
            items=(WorkItem(key, start=0, end=10, records=10),),
        )

    store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        ref = ConnectorRef("p", "t", "c")
        clean, dirty, planned = store.plan_batches(ref, [plan("a"), plan("b"), plan("c")])

        def commit(batch_id: int, key: str, records: int, bad: int) -> None:
            receipt = ItemReceipt(key, 10, records, bad, 100, True, 0)
            assert store.commit_batch(batch_id, "1-x", [receipt], [])

        commit(clean, "a", 10, 0)
        commit(dirty, "b", 7, 3)
        one = batch_lineage(store, "p", table, connector, wh, [store.load_batch(clean)])
        assert [(d.name, d.rows, d.size) for d in one.outputs] == [(f"{wh}/p/t", 10, 100)]
        assert [(d.namespace, d.name, d.size) for d in one.inputs] == [
            ("connector://p", "t/c/datagen", 100)
        ]
        run = batch_lineage(
            store, "p", table, connector, wh, [store.load_batch(b) for b in (clean, dirty, planned)]
        )
        table_out, errors_out = run.outputs
        assert (table_out.rows, table_out.size) == (17, 200)
        assert (errors_out.namespace, errors_out.name, errors_out.rows) == (
            "file",
            f"{wh}/p/t__errors",
            3,
        )
        assert ("raw_text", "string") in errors_out.fields
    finally:
        store.close()


def test_operator_lineage_carries_schema_statistics_and_descriptions() -> None:
    from openlineage.client.serde import Serde

    class Task:
        pass

    task = Task()
    assert operator_lineage(task).inputs == []  # gathered nothing: empty lineage
    setattr(
        task,
        LINEAGE_ATTRIBUTE,
        TaskLineage(
            (DatasetFacts("file", "/src", size=120, description="file_input: /src"),),
            (
                DatasetFacts("file", "/wh/p/t", (("id", "BIGINT"),), rows=7, size=120),
                connector_dataset("p", "t", "c"),
            ),
        ),
    )
    lineage = operator_lineage(task)
    [source] = [json.loads(Serde.to_json(d)) for d in lineage.inputs]
    assert source["inputFacets"]["inputStatistics"]["size"] == 120
    assert source["facets"]["documentation"]["description"] == "file_input: /src"
    table, asset = [json.loads(Serde.to_json(d)) for d in lineage.outputs]
    assert fields_of(table) == [("id", "BIGINT")]
    assert table["outputFacets"]["outputStatistics"] == {
        "_producer": table["outputFacets"]["outputStatistics"]["_producer"],
        "_schemaURL": table["outputFacets"]["outputStatistics"]["_schemaURL"],
        "rowCount": 7,
        "size": 120,
    }
    assert (asset["namespace"], asset["name"], asset.get("outputFacets")) == (
        "connector://p",
        "t/c",
        {},
    )


def test_connector_asset_scheme_is_registered_with_airflow(airflow_db: Path) -> None:
    from urllib.parse import urlsplit

    from airflow.providers.openlineage.utils.utils import translate_airflow_asset
    from airflow.sdk import Asset

    from airflow_connectors.airflow import connector_asset

    asset = connector_asset("shop", "orders", "landing")
    assert asset.normalized_uri == "connector://shop/orders/landing"
    dataset = translate_airflow_asset(asset, None)
    assert dataset is not None
    assert (dataset.namespace, dataset.name) == ("connector://shop", "orders/landing")
    with pytest.raises(ValueError, match=r"connector://<pipeline>/<table>/<connector>"):
        Asset(uri="connector://shop/orders")
    with pytest.raises(ValueError):
        sanitize_uri(urlsplit("connector:///orders/landing"))


# --- a real dag.test() run with the OpenLineage provider --------------------------------

PROBE = """
import json, sys
from airflow.dag_processing.dagbag import DagBag

states = {}
for arg in sys.argv[1:]:
    if arg.endswith(".py"):  # a DAG file, then the ids of its DAGs to run
        bag = DagBag(dag_folder=arg)
        assert not bag.import_errors, bag.import_errors
    else:
        states[arg] = str(bag.dags[arg].test().state)
print("STATES " + json.dumps(states))
"""

USER_DAG = """
import datetime as dt
from airflow.sdk import DAG
from airflow_connectors.airflow import ConnectorTaskGroup

with DAG("lin_user", schedule=None, max_active_runs=1, start_date=dt.datetime(2024, 1, 1)):
    ConnectorTaskGroup(spec="lintg.yaml", connector="numbers.gen")
"""


def events_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def completes(events: list[dict[str, Any]], job: str) -> list[dict[str, Any]]:
    return [e for e in events if e["eventType"] == "COMPLETE" and e["job"]["name"] == job]


def test_dag_runs_emit_lineage_of_sources_and_tables(
    tmp_path: Path,
    connectors_env: dict[str, str],
    s3_server: S3Server,
    s3_bucket: str,
) -> None:
    """Two connector DAGs (a folder of files, an S3 prefix read with inline keys) and a
    user's DAG holding a generated connector as a task group run with ``dag.test()`` in a
    fresh interpreter whose OpenLineage provider writes events to a file: each ingest and
    finished task reports its source, its table with the schema and the rows and bytes it
    committed, and no secret of the configs."""
    src = tmp_path / "src"
    ids = json_files(src, files=2, rows=10)
    source_bytes = sum(p.stat().st_size for p in src.iterdir())
    for n in range(2):
        body = "".join(
            json.dumps({"id": i, "name": f"s{i}"}) + "\n" for i in range(n * 5, n * 5 + 5)
        )
        s3_server.client().put_object(Bucket=s3_bucket, Key=f"orders/{n}.json", Body=body.encode())
    s3_connector = {
        "name": "landing",
        "transport": {
            "name": "s3_input",
            "config": {
                "bucket_name": s3_bucket,
                "prefix": "orders/",
                "endpoint_url": s3_server.endpoint_url,
                "region": REGION,
                "aws_access_key_id": ACCESS_KEY,
                "aws_secret_access_key": SECRET_KEY,
                "relist_margin_s": 0,
            },
        },
        "format": {"name": "json", "config": {"update_format": "raw"}},
    }
    write_pipeline(
        "lin",
        {
            "events": {"columns": COLUMNS, "connectors": [files_connector(src)]},
            "orders": {"columns": COLUMNS, "connectors": [s3_connector]},
        },
    )
    # A third connector inside a user's own DAG (a task group): its tasks' ids carry the
    # group's prefix; a generated source has no name in the naming spec.
    generated = {
        "numbers": {
            "columns": {"id": "BIGINT NOT NULL"},
            "connectors": [
                {
                    "name": "gen",
                    "transport": {"name": "datagen", "config": {"plan": [{"limit": 6}]}},
                }
            ],
        }
    }
    (DAGS / "lintg.yaml").write_text(json.dumps({"pipeline": "lintg", "tables": generated}))
    (DAGS / "lin_user_dag.py").write_text(USER_DAG)
    events_file = tmp_path / "lineage.jsonl"
    env = {
        **os.environ,
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(events_file), "append": True}
        ),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "lineage-test",
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            PROBE,
            str(DAGS / "lin_dags.py"),
            "lin.events.files",
            "lin.orders.landing",
            str(DAGS / "lin_user_dag.py"),
            "lin_user",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    [states] = [json.loads(x[7:]) for x in proc.stdout.splitlines() if x.startswith("STATES ")]
    assert states == {
        "lin.events.files": "success",
        "lin.orders.landing": "success",
        "lin_user": "success",
    }, proc.stderr[-4000:]

    text = events_file.read_text()
    for secret in (SECRET_KEY, ACCESS_KEY):
        assert secret not in text, "a secret of the S3 config is in the lineage events"
    events = events_of(events_file)
    table_path = f"{connectors_env['AIRFLOW__CONNECTORS__WAREHOUSE']}/lin/events"

    [ingest] = completes(events, "lin.events.files.ingest")
    assert ingest["job"]["namespace"] == "lineage-test"
    [source] = ingest["inputs"]
    assert (source["namespace"], source["name"]) == ("file", str(src))
    assert source["inputFacets"]["inputStatistics"]["size"] == source_bytes
    [table] = ingest["outputs"]
    assert (table["namespace"], table["name"]) == ("file", table_path)
    assert fields_of(table) == [("id", "BIGINT"), ("name", "VARCHAR")]
    stats = table["outputFacets"]["outputStatistics"]
    assert (stats["rowCount"], stats["size"]) == (len(ids), source_bytes)

    [finished] = completes(events, "lin.events.files.finished")
    assert [(d["namespace"], d["name"]) for d in finished["inputs"]] == [("file", str(src))]
    table, asset = finished["outputs"]
    assert (table["namespace"], table["name"]) == ("file", table_path)
    assert table["outputFacets"]["outputStatistics"]["rowCount"] == len(ids)
    assert (asset["namespace"], asset["name"]) == ("connector://lin", "events/files")

    [s3_ingest] = completes(events, "lin.orders.landing.ingest")
    [s3_source] = s3_ingest["inputs"]
    assert (s3_source["namespace"], s3_source["name"]) == (f"s3://{s3_bucket}", "orders")
    assert s3_source["facets"]["documentation"]["description"].startswith("s3_input: s3://")
    [s3_table] = s3_ingest["outputs"]
    assert s3_table["name"] == f"{connectors_env['AIRFLOW__CONNECTORS__WAREHOUSE']}/lin/orders"
    assert s3_table["outputFacets"]["outputStatistics"]["rowCount"] == 10

    [group_ingest] = completes(events, "lin_user.numbers__gen.ingest")
    assert [(d["namespace"], d["name"]) for d in group_ingest["inputs"]] == [
        ("connector://lintg", "numbers/gen/datagen")
    ]
    [group_table] = group_ingest["outputs"]
    assert group_table["outputFacets"]["outputStatistics"]["rowCount"] == 6
    [group_finished] = completes(events, "lin_user.numbers__gen.finished")
    assert [(d["namespace"], d["name"]) for d in group_finished["outputs"]] == [
        ("file", f"{connectors_env['AIRFLOW__CONNECTORS__WAREHOUSE']}/lintg/numbers"),
        ("connector://lintg", "numbers/gen"),
    ]
    assert group_finished["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] == 6

    # The run the parent process sees in Airflow's database is the one that emitted them.
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        run = session.query(DagRun).filter(DagRun.dag_id == "lin.events.files").one()
        session.expunge(run)
    assert task_states(run)[("finished", -1)] == "success"
