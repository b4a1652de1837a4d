"""``airflow_connectors.sdk``, the plugin authors' import surface: every name it exports
resolves, importing it loads neither pyspark nor Airflow (nor pytest: the kits come on
first use), and a plugin written only against it type-checks under ``mypy --strict``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import airflow_connectors.sdk as sdk

ROOT = Path(__file__).resolve().parents[1]

#: A plugin and its tests, importing nothing of the package but the SDK.
PLUGIN = """
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pydantic import Field

from airflow_connectors.sdk import (
    Cursor,
    Kind,
    LineageDataset,
    Limits,
    PartWriter,
    Sink,
    SinkConfig,
    SinkConformance,
    Source,
    StrictConfig,
    Transport,
    TransportConformance,
    WorkItem,
    load_plugin,
    storage_dataset,
)


class CountConfig(StrictConfig):
    rows: int = Field(default=10, gt=0, description="How many rows the source holds.")


class CountTransport(Transport):
    name = "count"
    Config = CountConfig
    config: CountConfig
    needs_format = False

    def discover(self, cursor: Cursor, limits: Limits) -> Iterator[WorkItem]:
        if "rows" in cursor.in_flight:
            return
        done = cursor.get("rows")
        start = done.offset if done else 0
        if start < self.config.rows:
            n = self.config.rows - start
            yield WorkItem(key="rows", start=start, end=self.config.rows, records_done=start, records=n)

    def read(self, item: WorkItem) -> Iterator[pa.RecordBatch]:
        ids = list(range(item.start, item.end or item.start))
        yield pa.RecordBatch.from_pylist([{"id": i} for i in ids], schema=self.table.arrow_schema())

    def lineage_datasets(self) -> list[LineageDataset]:
        return [storage_dataset("/data/count")]


class NullConfig(SinkConfig):
    pass


class NullWriter(PartWriter):
    def write(self, table: pa.Table) -> None:
        pass

    def close(self) -> int:
        return 0


class NullSink(Sink):
    name = "null"
    Config = NullConfig

    def location(self, kind: Kind = "rows") -> str:
        return str(Path(self.warehouse) / self.pipeline / kind)

    def prepare(self, batch_id: int, attempt: str) -> None:
        pass

    def writer(self, batch_id: int, attempt: str, part: int, kind: Kind) -> PartWriter:
        return NullWriter()

    def publish(self, batch_id: int, attempt: str) -> None:
        pass

    def discard(self, batch_id: int, attempt: str | None = None) -> None:
        pass


class TestCount(TransportConformance):
    @pytest.fixture
    def source(self, tmp_path: Path) -> Source:
        return Source(
            transport="count",
            config={"rows": 2},
            columns={"id": "BIGINT NOT NULL"},
            format=None,
            records=[{"id": 0}, {"id": 1}],
            key_column="id",
        )


class TestNull(SinkConformance):
    sink_name = "null"


assert load_plugin("transport", "datagen").name == "datagen"
"""

#: What mypy must refuse, one error per line of ``BAD``.
BAD = """
from airflow_connectors.sdk import Cursor, WorkItem

WorkItem(key=1)
Cursor().get(2)
"""


def test_every_exported_name_resolves() -> None:
    assert len(set(sdk.__all__)) == len(sdk.__all__)
    missing = [name for name in sdk.__all__ if getattr(sdk, name, None) is None]
    assert not missing, f"airflow_connectors.sdk exports names it does not have: {missing}"
    with pytest.raises(AttributeError):
        _ = sdk.NoSuchName  # type: ignore[attr-defined]


def test_the_groups_and_the_loader_are_the_engines() -> None:
    assert sdk.TRANSPORT_GROUP == "airflow_connectors.transports"
    assert sdk.FORMAT_GROUP == "airflow_connectors.formats"
    assert sdk.SINK_GROUP == "airflow_connectors.sinks"
    assert sdk.load_plugin("sink", "parquet").name == "parquet"
    assert "json" in sdk.plugin_names("format")
    with pytest.raises(KeyError, match="unknown transport 'nope'"):
        sdk.load_plugin("transport", "nope")


def test_importing_the_sdk_loads_neither_spark_nor_airflow_nor_pytest() -> None:
    code = (
        "import sys, airflow_connectors.sdk\n"
        "top = {m.split('.')[0] for m in sys.modules}\n"
        "print(sorted(top & {'pyspark', 'airflow', 'pytest'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_plugin_written_against_the_sdk_type_checks(tmp_path: Path) -> None:
    (tmp_path / "plugin.py").write_text(textwrap.dedent(PLUGIN))
    (tmp_path / "bad.py").write_text(textwrap.dedent(BAD))
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "mypy"),
            "--strict",
            "--ignore-missing-imports",
            "--no-error-summary",
            "--hide-error-context",
            # The project's cache (make lint and scripts/test.sh keep it warm): seconds.
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            str(tmp_path / "plugin.py"),
            str(tmp_path / "bad.py"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    errors = [line for line in proc.stdout.splitlines() if ": error: " in line]
    in_plugin = [line for line in errors if "plugin.py" in line]
    assert not in_plugin, "\n".join(in_plugin)
    refused = sorted(int(line.split(":")[1]) for line in errors if "bad.py" in line)
    assert refused == [4, 5], proc.stdout + proc.stderr
