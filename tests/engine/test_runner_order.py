"""Embedded runs order connectors by ``start_after``: a chain of any length, declared in
any order, runs in one round (real state store, no Spark: the sources are empty)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import pipeline

from airflow_connectors.engine.runner import EmbeddedRunner, start_order
from airflow_connectors.settings import Settings
from airflow_connectors.state.store import StateStore


class _NoSpark:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"Spark was used ({name}) although no source has data")


def _empty(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "transport": {"name": "datagen", "config": {"plan": [{"limit": 0}]}},
        **extra,
    }


def _reversed_chain(n: int) -> dict[str, Any]:
    """c0 <- c1 <- ... <- c{n-1} (each starts after the previous one's label), declared
    last first: spec order is the opposite of the order they may start in."""
    connectors = [
        _empty(f"c{i}", labels=[f"l{i}"], **({"start_after": [f"l{i - 1}"]} if i else {}))
        for i in reversed(range(n))
    ]
    return {"t": {"columns": {"a": "INT"}, "connectors": connectors}}


def test_start_order_puts_carriers_first_and_keeps_spec_order_otherwise() -> None:
    spec = pipeline(
        {
            "t": {
                "columns": {"a": "INT"},
                "connectors": [
                    _empty("late", start_after="early"),
                    _empty("free"),
                    _empty("first", labels="early"),
                ],
            },
            "u": {"columns": {"a": "INT"}, "connectors": [_empty("other")]},
        }
    )
    order = start_order(spec.connectors())
    assert [f"{t.name}.{c.name}" for t, c in order] == ["t.free", "t.first", "t.late", "u.other"]


@pytest.mark.slow
def test_a_start_after_chain_of_1000_finishes_in_one_run(tmp_path: Path) -> None:
    spec = pipeline(_reversed_chain(1000))
    url = f"sqlite:///{tmp_path / 'state.db'}"
    store = StateStore(url)
    try:
        runner = EmbeddedRunner(
            spec,
            Settings(state_store_url=url, warehouse=str(tmp_path / "wh")),
            store=store,
            spark=_NoSpark,
        )
        report = runner.run()
    finally:
        store.close()
    assert len(report.connectors) == 1000
    not_finished = [ep for ep, r in report.connectors.items() if r.status != "finished"]
    assert not_finished == []
    assert list(report.connectors)[:2] == ["t.c0", "t.c1"]  # reported in start order
