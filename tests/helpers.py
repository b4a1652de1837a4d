"""Small helpers shared by tests (no mocks: real engine, real Spark, real stores)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from airflow_connectors.catalog import parse_pipeline
from airflow_connectors.engine.runner import EmbeddedRunner, RunReport
from airflow_connectors.settings import Settings
from airflow_connectors.sinks import _fs
from airflow_connectors.sinks._fs import parquet_dataset
from airflow_connectors.spec import PipelineSpec
from airflow_connectors.state.store import ConnectorRef, ConnectorState, StateStore
from airflow_connectors.testing.conformance import table_checksum as checksum  # noqa: F401 - for tests
from airflow_connectors.testing.sink_kit import PIPELINE, SinkCase


def pipeline(tables: dict[str, Any], name: str = "p", base_dir: Path | None = None) -> PipelineSpec:
    return parse_pipeline({"pipeline": name, "tables": tables}, base_dir=base_dir)


def run(spec: PipelineSpec, store_url: str, warehouse: str, spark: Any, **kwargs: Any) -> RunReport:
    settings = Settings(state_store_url=store_url, warehouse=warehouse, spark_master="local[2]")
    store = StateStore(store_url)
    try:
        return EmbeddedRunner(spec, settings, store=store, spark=lambda: spark).run(**kwargs)
    finally:
        store.close()


def assert_parquet_landed(case: SinkCase) -> None:
    """The ``parquet`` sink's own checks once a sink-kit case landed, on any warehouse:
    nothing is left in the staging, and the table holds the parts' deterministic names."""
    from pyarrow import fs as pafs

    fs, staging = _fs.filesystem(_fs.join(case.warehouse, PIPELINE, "_staging"))
    found = fs.get_file_info(pafs.FileSelector(staging, recursive=True, allow_not_found=True))
    left = [i.path for i in found if i.type == pafs.FileType.File]
    assert left == [], f"{case.name}: staged files left: {left[:5]}"
    names = [p.rsplit("/", 1)[1] for p in _fs.files(*_fs.filesystem(case.sink().location()))]
    assert names and all(n.startswith("part-") for n in names), f"{case.name}: {names[:5]}"


def read_table(warehouse: str, pipeline: str, table: str) -> pa.Table:
    path = Path(warehouse) / pipeline / table
    if not path.is_dir():
        return pa.table({})
    # Files of several schema versions are read with their union (a column a later batch
    # added is null in earlier files), as the sink reads its table.
    dataset = parquet_dataset(str(path))
    return pa.table({}) if dataset is None else dataset.to_table()


def status(store_url: str, pipeline: str, table: str, connector: str) -> ConnectorState:
    store = StateStore(store_url)
    try:
        st = store.status(ConnectorRef(pipeline, table, connector))
    finally:
        store.close()
    assert st is not None, f"no state for {pipeline}.{table}.{connector}"
    return st


def headless_chromium(width: int, height: int) -> Any:
    """A headless Chromium driven by selenium (Debian's chromium and chromedriver), its
    window ``width`` x ``height``; fails the test naming the packages when they are
    missing."""
    import shutil

    import pytest
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not binary or not driver:
        pytest.fail(
            "the browser test needs Chromium and chromedriver "
            "(Debian: apt-get install chromium chromium-driver)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
    ):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(driver), options=options)


#: Publish one batch of a pipeline's first table in a child process, as the ingest job
#: does after its commit. Arguments: ``<pipeline JSON> <warehouse> <batch id> <attempt>``.
PUBLISH = """
import json, sys
from airflow_connectors.catalog import parse_pipeline
from airflow_connectors.engine.discovery import context
spec = parse_pipeline(json.loads(sys.argv[1]))
table = spec.tables[0]
sink = context(spec, table, table.connectors[0], sys.argv[2]).sink()
sink.publish(int(sys.argv[3]), sys.argv[4])
"""
