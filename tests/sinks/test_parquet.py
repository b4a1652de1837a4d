"""The ``parquet`` sink on a local warehouse runs the sink conformance kit
(:mod:`airflow_connectors.testing.sink_kit`). Its publish renames the batch's parts into
the table one by one, so a reader may see part of a batch while it runs
(``atomic_publish = False``); a crash in the middle of it (``mid_publish``) is rolled
forward by the next run."""

from __future__ import annotations

from helpers import assert_parquet_landed

from airflow_connectors.testing.sink_kit import SinkCase, SinkConformance


class TestParquetSink(SinkConformance):
    sink_name = "parquet"
    sink_fail_points = ("mid_publish",)
    atomic_publish = False

    def check_landed(self, case: SinkCase) -> None:
        assert_parquet_landed(case)
