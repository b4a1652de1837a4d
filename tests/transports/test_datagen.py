"""Tests of the ``datagen`` transport: plans, discovery, determinism, strategies, types."""

from __future__ import annotations

import datetime as dt
import itertools
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pydantic import ValidationError

from airflow_connectors.spec.models import ColumnSpec, TableSpec
from airflow_connectors.spec.types import SqlType
from airflow_connectors.transports.base import Cursor, KeyOffset, Limits, WorkItem
from airflow_connectors.transports.datagen import DatagenConfig, DatagenTransport

ALL_TYPES = {
    "b": SqlType("BOOLEAN"),
    "ti": SqlType("TINYINT"),
    "si": SqlType("SMALLINT"),
    "i": SqlType("INT"),
    "bi": SqlType("BIGINT"),
    "r": SqlType("REAL"),
    "d": SqlType("DOUBLE"),
    "dec": SqlType("DECIMAL", 10, 2),
    "s": SqlType("VARCHAR"),
    "dt": SqlType("DATE"),
    "tm": SqlType("TIME"),
    "ts": SqlType("TIMESTAMP"),
}


def table(**columns: str | SqlType) -> TableSpec:
    """``table(id="BIGINT NOT NULL", x="DOUBLE")``: a table with those columns."""
    specs = []
    for name, typ in columns.items():
        if isinstance(typ, SqlType):
            specs.append(ColumnSpec(name=name, type=typ))
        else:
            kind, _, rest = typ.partition(" ")
            specs.append(ColumnSpec(name=name, type=SqlType(kind), nullable=rest != "NOT NULL"))
    return TableSpec(name="t", columns=tuple(specs))


def transport(config: dict[str, Any], tbl: TableSpec) -> DatagenTransport:
    return DatagenTransport(DatagenConfig.model_validate(config), tbl)


def one_plan(
    limit: int | None = 10_000, seed: int | None = 1, **fields: dict[str, Any]
) -> dict[str, Any]:
    return {"seed": seed, "plan": [{"limit": limit, "fields": fields}]}


def discover(t: DatagenTransport, cursor: Cursor | None = None, **limits: Any) -> list[WorkItem]:
    return list(t.discover(cursor or Cursor(), Limits(**limits)))


def read(t: DatagenTransport, items: list[WorkItem]) -> pa.Table:
    batches = [b for item in items for b in t.read(item)]
    return pa.Table.from_batches(batches, schema=t.table.arrow_schema())


def generate(config: dict[str, Any], tbl: TableSpec) -> pa.Table:
    """Every row of a bounded config (whose plans fit in one discovery)."""
    t = transport(config, tbl)
    return read(t, discover(t))


def committed(*offsets: int, in_flight: tuple[str, ...] = (), first: float | None = None) -> Cursor:
    return Cursor(
        offsets={
            f"plan-{p:04d}": KeyOffset(offset=o, records=o, completed=True)
            for p, o in enumerate(offsets)
        },
        in_flight=frozenset(in_flight),
        first_discovered_at=first,
    )


# --- discovery ---------------------------------------------------------------------------


def test_limit_yields_exactly_that_many_rows_in_chunked_items() -> None:
    config = one_plan(limit=10_000)
    config["plan"][0]["worker_chunk_size"] = 3000
    t = transport(config, table(id="BIGINT"))
    items = discover(t)
    assert [(i.key, i.start, i.end, i.records) for i in items] == [
        ("plan-0000", 0, 3000, 3000),
        ("plan-0000", 3000, 6000, 3000),
        ("plan-0000", 6000, 9000, 3000),
        ("plan-0000", 9000, 10_000, 1000),
    ]
    assert all(i.final and i.records_done == i.start for i in items)
    rows = read(t, items)
    assert rows.num_rows == 10_000
    assert rows.column("id").to_pylist() == list(range(10_000))


def test_discovery_resumes_after_the_committed_offset_and_skips_in_flight() -> None:
    t = transport(one_plan(limit=10_000), table(id="BIGINT"))
    items = discover(t, committed(4000))
    assert [(i.start, i.end) for i in items] == [(4000, 10_000)]
    assert read(t, items).column("id").to_pylist() == list(range(4000, 10_000))
    assert discover(t, committed(4000, in_flight=("plan-0000",))) == []
    assert discover(t, committed(10_000)) == []


def test_plans_run_in_order_and_wait_for_earlier_plans() -> None:
    config = {"seed": 3, "plan": [{"limit": 5}, {"limit": 3, "fields": {"id": {"values": [7]}}}]}
    t = transport(config, table(id="BIGINT"))
    # Plan 0 ends within this discovery, so plan 1 may follow it.
    items = discover(t)
    assert [(i.key, i.start, i.end) for i in items] == [("plan-0000", 0, 5), ("plan-0001", 0, 3)]
    assert read(t, items).column("id").to_pylist() == [0, 1, 2, 3, 4, 7, 7, 7]
    # Plan 0 cut short by max_records: plan 1 must not start.
    assert [(i.key, i.end) for i in discover(t, max_records=4)] == [("plan-0000", 4)]
    # Plan 0 in flight and not committed: nothing, not even plan 1.
    assert discover(t, committed(0, in_flight=("plan-0000",))) == []
    # Plan 0 committed: plan 1 proceeds.
    assert [(i.key, i.start, i.end) for i in discover(t, committed(5))] == [("plan-0001", 0, 3)]


def test_an_unlimited_plan_blocks_later_plans_and_is_capped_per_discovery() -> None:
    t = transport({"plan": [{}, {"limit": 5}]}, table(id="BIGINT"))
    assert not t.bounded
    items = discover(t, max_records=250_000)
    assert {i.key for i in items} == {"plan-0000"}
    assert sum(i.records or 0 for i in items) == 250_000
    # Nothing bounds it: one discovery still ends, at 1_000_000 rows.
    items = discover(t, committed(2_000_000))
    assert {i.key for i in items} == {"plan-0000"}
    assert (items[0].start, items[-1].end) == (2_000_000, 3_000_000)
    assert not t.exhausted(committed(10**9, 5))


def test_max_records_and_max_items_cap_a_discovery() -> None:
    config = one_plan(limit=1000)
    config["plan"][0]["worker_chunk_size"] = 100
    t = transport(config, table(id="BIGINT"))
    assert sum(i.records or 0 for i in discover(t, max_records=250)) == 250
    assert [(i.start, i.end) for i in discover(t, max_items=2)] == [(0, 100), (100, 200)]


def test_rate_caps_rows_by_elapsed_time() -> None:
    t = transport({"plan": [{"rate": 100, "limit": 1000}]}, table(id="BIGINT"))
    # First discovery: one second's worth.
    assert [(i.start, i.end) for i in discover(t, now=50.0)] == [(0, 100)]
    # Those 100 committed half a second later: nothing new yet.
    assert discover(t, committed(100, first=50.0), now=50.5) == []
    # 3.5 s after the first discovery: 350 rows in total are allowed.
    assert [(i.start, i.end) for i in discover(t, committed(100, first=50.0), now=53.5)] == [
        (100, 350)
    ]
    # Never past the limit.
    assert [(i.start, i.end) for i in discover(t, committed(100, first=50.0), now=500.0)] == [
        (100, 1000)
    ]


def test_a_plan_held_back_by_its_rate_holds_back_later_plans() -> None:
    t = transport({"plan": [{"rate": 10, "limit": 100}, {"limit": 5}]}, table(id="BIGINT"))
    assert [(i.key, i.start, i.end) for i in discover(t, now=0.0)] == [("plan-0000", 0, 10)]


def test_a_later_rated_plan_starts_its_clock_when_the_earlier_one_is_due_to_end() -> None:
    t = transport(
        {"plan": [{"rate": 10, "limit": 20}, {"rate": 10, "limit": 100}]}, table(id="BIGINT")
    )
    # Plan 0 takes 2 s; 5 s after start, plan 1 has had 3 s: 30 rows.
    items = discover(t, committed(20, first=0.0), now=5.0)
    assert [(i.key, i.start, i.end) for i in items] == [("plan-0001", 0, 30)]


def test_exhausted_once_every_plan_is_committed() -> None:
    t = transport({"plan": [{"limit": 100}, {"limit": 0}, {"limit": 7}]}, table(id="BIGINT"))
    assert t.bounded
    assert t.exhausted(Cursor()) is False
    assert t.exhausted(committed(100)) is False
    assert t.exhausted(committed(100, 0, 6)) is False
    assert t.exhausted(committed(100, 0, 7)) is True
    # The empty plan is skipped by discovery.
    assert [(i.key, i.end) for i in discover(t, committed(100))] == [("plan-0002", 7)]


def test_limit_zero_is_exhausted_immediately() -> None:
    t = transport({"plan": [{"limit": 0}]}, table(id="BIGINT"))
    assert t.exhausted(Cursor()) is True
    assert discover(t) == []


def test_read_rejects_items_outside_the_config() -> None:
    t = transport(one_plan(limit=10), table(id="BIGINT"))
    with pytest.raises(ValueError, match="names no plan"):
        list(t.read(WorkItem(key="plan-0001", start=0, end=5)))
    with pytest.raises(ValueError, match="outside plan 0"):
        list(t.read(WorkItem(key="plan-0000", start=0, end=11)))


def test_describe() -> None:
    t = transport(
        {"seed": 1, "plan": [{"limit": 4000}, {"limit": 6000, "rate": 50}]}, table(id="BIGINT")
    )
    assert t.describe() == "datagen: 2 plans, limit 10000, rate 50 rows/s, seed 1"
    assert transport({}, table(id="BIGINT")).describe() == "datagen: 1 plan, unlimited, seed 0"


# --- determinism ---------------------------------------------------------------------------

RANDOM_FIELDS = {
    "a": {"strategy": "uniform", "range": [-1000, 1000], "null_percentage": 20},
    "x": {"strategy": "uniform"},
    "s": {"strategy": "uniform", "range": [1, 8]},
    "z": {"strategy": "zipf", "range": [0, 50]},
}
RANDOM_TABLE = table(id="BIGINT", a="INT", x="DOUBLE", s="VARCHAR", z="SMALLINT")


def read_split(seed: int, bounds: list[int]) -> pa.Table:
    t = transport(one_plan(limit=bounds[-1], seed=seed, **RANDOM_FIELDS), RANDOM_TABLE)
    items = [WorkItem(key="plan-0000", start=a, end=b) for a, b in itertools.pairwise(bounds)]
    return read(t, items)


def test_same_seed_gives_the_same_rows_however_items_are_split() -> None:
    whole = read_split(7, [0, 25_000])
    assert whole.num_rows == 25_000
    for bounds in (
        [0, 3, 9_999, 10_001, 17_777, 25_000],
        [0, 12_345, 25_000],
        list(range(0, 25_001, 2500)),
    ):
        assert read_split(7, bounds).equals(whole)


def test_a_different_seed_gives_different_rows() -> None:
    a, b = read_split(7, [0, 5000]), read_split(8, [0, 5000])
    for name in ("a", "x", "s", "z"):
        assert not a.column(name).equals(b.column(name)), name
    # increment does not depend on the seed
    assert a.column("id").equals(b.column("id"))


def test_plans_draw_independent_values() -> None:
    fields = {"x": {"strategy": "uniform"}}
    config = {
        "seed": 1,
        "plan": [{"limit": 100, "fields": fields}, {"limit": 100, "fields": fields}],
    }
    rows = generate(config, table(x="DOUBLE"))
    x = rows.column("x").to_pylist()
    assert x[:100] != x[100:]


# --- strategies ---------------------------------------------------------------------------


def test_uniform_values_stay_in_the_half_open_range() -> None:
    tbl = table(
        i="INT",
        ti="TINYINT",
        d="DOUBLE",
        r="REAL",
        dec=SqlType("DECIMAL", 6, 2),
        dt="DATE",
        ts="TIMESTAMP",
        s="VARCHAR",
    )
    config = one_plan(
        limit=20_000,
        i={"strategy": "uniform", "range": [-5, 5]},
        ti={"strategy": "uniform", "range": [120, 128]},
        d={"strategy": "uniform", "range": [2.5, 3.0]},
        r={"strategy": "uniform", "range": [0, 1e-6]},
        dec={"strategy": "uniform", "range": [1, 1.05]},
        dt={"strategy": "uniform", "range": ["2024-02-27", "2024-03-02"]},
        ts={"strategy": "uniform", "range": ["2024-01-01T00:00:00Z", 1_704_067_200_005]},
        s={"strategy": "uniform", "range": [2, 4]},
    )
    rows = generate(config, tbl)
    assert sorted(set(rows.column("i").to_pylist())) == list(range(-5, 5))
    assert sorted(set(rows.column("ti").to_pylist())) == list(range(120, 128))
    d = rows.column("d")
    assert pc.min(d).as_py() >= 2.5 and pc.max(d).as_py() < 3.0
    assert pc.max(d).as_py() - pc.min(d).as_py() > 0.49
    r = rows.column("r")
    assert pc.min(r).as_py() >= 0 and pc.max(r).as_py() < 1e-6
    assert sorted(set(rows.column("dec").to_pylist())) == [Decimal(f"1.0{k}") for k in range(5)]
    days = sorted(set(rows.column("dt").to_pylist()))
    assert days == [
        dt.date(2024, 2, 27),
        dt.date(2024, 2, 28),
        dt.date(2024, 2, 29),
        dt.date(2024, 3, 1),
    ]
    stamps = sorted(set(rows.column("ts").to_pylist()))
    assert stamps == [dt.datetime(2024, 1, 1) + dt.timedelta(milliseconds=k) for k in range(5)]
    lengths = set(pc.utf8_length(rows.column("s")).to_pylist())
    assert lengths == {2, 3}
    assert all(v.isascii() and v.islower() for v in rows.column("s").to_pylist())


def test_uniform_floats_never_round_up_to_the_upper_bound() -> None:
    # Each range is one step of its type wide: a naive a + u * (b - a) rounds to b
    # about half the time.
    config = one_plan(
        limit=5000,
        r={"strategy": "uniform", "range": [1.0, 1.0000001]},
        d={"strategy": "uniform", "range": [1.0, 1.0000000000000002]},
    )
    rows = generate(config, table(r="REAL", d="DOUBLE"))
    assert set(rows.column("r").to_pylist()) == {1.0}
    assert set(rows.column("d").to_pylist()) == {1.0}


def test_uniform_scale_steps_values() -> None:
    rows = generate(
        one_plan(limit=5000, x={"strategy": "uniform", "range": [10, 30], "scale": 5}),
        table(x="INT"),
    )
    assert sorted(set(rows.column("x").to_pylist())) == [10, 15, 20, 25]


def test_uniform_over_the_full_bigint_range() -> None:
    rows = generate(one_plan(limit=10_000, x={"strategy": "uniform"}), table(x="BIGINT"))
    x = rows.column("x")
    # Both signs, spread over the whole 64-bit range.
    assert pc.min(x).as_py() < -(2**62) and pc.max(x).as_py() > 2**62


def test_increment_with_a_range_wraps_within_it() -> None:
    config = one_plan(
        limit=100,
        a={"range": [10, 20], "scale": 3},
        d={"range": [0.5, 2.5], "scale": 1},
        dt={"range": ["2024-01-30", "2024-02-02"]},
        tm={"range": [0, 5000]},
    )
    rows = generate(config, table(a="INT", d="DOUBLE", dt="DATE", tm="TIME"))
    assert rows.column("a").to_pylist() == [10 + (i * 3) % 10 for i in range(100)]
    assert rows.column("d").to_pylist()[:5] == [0.5, 1.5, 0.5, 1.5, 0.5]
    assert rows.column("dt").to_pylist()[:4] == [
        dt.date(2024, 1, 30),
        dt.date(2024, 1, 31),
        dt.date(2024, 2, 1),
        dt.date(2024, 1, 30),
    ]
    # TIME steps by seconds; the range is in milliseconds.
    assert rows.column("tm").to_pylist()[:7] == [dt.time(0, 0, s % 5) for s in range(7)]


def test_increment_defaults_per_type() -> None:
    rows = generate(one_plan(limit=300), table(**ALL_TYPES))
    n = range(300)
    assert rows.column("b").to_pylist() == [i % 2 == 1 for i in n]
    # Integers wrap like the SQL type: TINYINT goes 126, 127, -128, ...
    assert rows.column("ti").to_pylist() == [(i + 128) % 256 - 128 for i in n]
    assert rows.column("bi").to_pylist() == list(n)
    assert rows.column("d").to_pylist() == [float(i) for i in n]
    assert rows.column("dec").to_pylist() == [Decimal(i) for i in n]
    assert rows.column("s").to_pylist() == [str(i) for i in n]
    assert rows.column("dt").to_pylist() == [dt.date(1970, 1, 1) + dt.timedelta(days=i) for i in n]
    assert rows.column("ts").to_pylist() == [
        dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=i) for i in n
    ]
    assert rows.column("tm").to_pylist()[:3] == [
        dt.time(0, 0, 0),
        dt.time(0, 0, 1),
        dt.time(0, 0, 2),
    ]


def test_increment_scale_and_string_offset() -> None:
    rows = generate(
        one_plan(limit=4, a={"scale": 10}, s={"range": [100, 200], "scale": 2}),
        table(a="INT", s="VARCHAR"),
    )
    assert rows.column("a").to_pylist() == [0, 10, 20, 30]
    assert rows.column("s").to_pylist() == ["100", "102", "104", "106"]


def test_time_wraps_at_24_hours() -> None:
    t = transport(one_plan(limit=86_402), table(tm="TIME"))
    rows = read(t, [WorkItem(key="plan-0000", start=86_399, end=86_402)])
    assert rows.column("tm").to_pylist() == [
        dt.time(23, 59, 59),
        dt.time(0, 0, 0),
        dt.time(0, 0, 1),
    ]


def test_zipf_skews_to_low_values() -> None:
    rows = generate(
        one_plan(limit=50_000, z={"strategy": "zipf", "range": [10, 110]}), table(z="INT")
    )
    counts = pc.value_counts(rows.column("z")).to_pylist()
    freq = {c["values"]: c["counts"] / 50_000 for c in counts}
    assert min(freq) == 10 and max(freq) <= 109
    harmonic = sum(1 / k for k in range(1, 101))
    # P(k) = 1/(k+1) / H_100: about 19% at the bottom of the range, 1% at k = 19.
    assert freq[10] == pytest.approx(1 / harmonic, abs=0.01)
    assert freq[11] == pytest.approx(1 / (2 * harmonic), abs=0.01)
    assert freq[10] > freq[11] > freq[20] > freq.get(100, 0)
    assert pc.mean(rows.column("z")).as_py() < 35  # a uniform draw would average 59.5


def test_zipf_exponent_sharpens_the_skew() -> None:
    def share_of_first(e: float) -> float:
        rows = generate(
            one_plan(limit=20_000, z={"strategy": "zipf", "range": [0, 10], "e": e}), table(z="INT")
        )
        return pc.sum(pc.equal(rows.column("z"), 0)).as_py() / 20_000

    assert share_of_first(0) == pytest.approx(0.1, abs=0.02)  # e = 0 is uniform
    assert share_of_first(2) == pytest.approx(1 / sum(1 / k**2 for k in range(1, 11)), abs=0.02)


def test_values_are_cycled_picked_or_skewed() -> None:
    config = one_plan(
        limit=6000,
        inc={"values": ["x", "y", "z"]},
        uni={"strategy": "uniform", "values": [5, 6]},
        zip={"strategy": "zipf", "values": ["2024-01-01", "2024-06-01"]},
        empty={"values": []},
    )
    rows = generate(config, table(inc="VARCHAR", uni="INT", zip="DATE", empty="DOUBLE"))
    assert rows.column("inc").to_pylist()[:5] == ["x", "y", "z", "x", "y"]
    assert set(rows.column("uni").to_pylist()) == {5, 6}
    zipped = rows.column("zip").to_pylist()
    assert set(zipped) == {dt.date(2024, 1, 1), dt.date(2024, 6, 1)}
    assert zipped.count(dt.date(2024, 1, 1)) > zipped.count(dt.date(2024, 6, 1)) * 1.6  # 2/3 vs 1/3
    assert rows.column("empty").null_count == 6000


def test_null_percentage_is_roughly_respected() -> None:
    config = one_plan(
        limit=20_000,
        a={"null_percentage": 30},
        s={"strategy": "uniform", "null_percentage": 100},
    )
    rows = generate(config, table(a="INT", s="VARCHAR", c="INT"))
    assert rows.column("a").null_count / 20_000 == pytest.approx(0.3, abs=0.02)
    assert rows.column("s").null_count == 20_000
    assert rows.column("c").null_count == 0
    # The non-NULL values are still the increment at their row.
    a = rows.column("a").to_pylist()
    assert all(v == i for i, v in enumerate(a) if v is not None)


# --- types ------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["increment", "uniform", "zipf"])
def test_every_column_type_has_its_arrow_type(strategy: str) -> None:
    tbl = TableSpec(
        name="t",
        columns=tuple(ColumnSpec(name=n, type=t, nullable=n != "bi") for n, t in ALL_TYPES.items()),
    )
    fields: dict[str, Any] = {
        n: {"strategy": strategy, "null_percentage": 10} for n in ALL_TYPES if n != "bi"
    }
    fields["bi"] = {"strategy": strategy}
    if strategy == "zipf":  # domains too large for zipf by default
        for n in ("i", "bi", "r", "d", "dec", "tm", "ts"):
            fields[n]["range"] = [0, 1000]
    t = transport(one_plan(limit=12_000, **fields), tbl)
    batches = [b for item in discover(t) for b in t.read(item)]
    expected = pa.schema(
        [
            ("b", pa.bool_()),
            ("ti", pa.int8()),
            ("si", pa.int16()),
            ("i", pa.int32()),
            pa.field("bi", pa.int64(), nullable=False),
            ("r", pa.float32()),
            ("d", pa.float64()),
            ("dec", pa.decimal128(10, 2)),
            ("s", pa.string()),
            ("dt", pa.date32()),
            ("tm", pa.time64("us")),
            ("ts", pa.timestamp("us")),
        ]
    )
    assert sum(b.num_rows for b in batches) == 12_000
    for batch in batches:
        assert batch.schema.equals(expected)
        batch.validate(full=True)
    rows = pa.Table.from_batches(batches)
    assert rows.column("bi").null_count == 0
    assert all(rows.column(n).null_count > 0 for n in ALL_TYPES if n != "bi")


# --- validation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config",
    [
        {"plans": []},
        {"plan": [{"limits": 5}]},
        {"plan": [{"fields": {"a": {"strategy": "uniform", "min": 0}}}]},
        {"plan": [{"fields": {"a": {"strategy": "word"}}}]},
        {"plan": [{"fields": {"a": {"range": [5, 5]}}}]},
        {"plan": [{"fields": {"a": {"range": [6, 5]}}}]},
        {"plan": [{"fields": {"a": {"null_percentage": 0}}}]},
        {"plan": [{"fields": {"a": {"null_percentage": 101}}}]},
        {"plan": [{"rate": 0}]},
        {"plan": [{"limit": -1}]},
        {"seed": -1},
    ],
)
def test_invalid_configs_are_rejected(config: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        DatagenConfig.model_validate(config)


def test_defaults_and_ignored_feldera_keys_are_accepted() -> None:
    config = DatagenConfig.model_validate({"workers": 4, "transaction_size": 10})
    assert len(config.plan) == 1 and config.plan[0].limit is None and config.seed is None


def test_a_field_that_is_not_a_column_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"field 'nope' is not a column .*its columns: id, name"):
        transport(one_plan(nope={}), table(id="BIGINT", name="VARCHAR"))


@pytest.mark.parametrize(
    ("column", "settings", "message"),
    [
        ("TINYINT", {"strategy": "uniform", "range": [0, 200]}, "outside the type"),
        ("TINYINT", {"values": [1, 300]}, "values do not fit"),
        ("INT", {"range": [1.5, 3]}, "must be an integer"),
        ("DATE", {"range": ["2024-03-01", "2024-01-01"]}, "is empty"),
        ("DATE", {"range": ["2024-03-01", 19_000]}, "is empty"),  # 19000 days: 2022-01-08
        ("DATE", {"range": ["yesterday", "2024-01-01"]}, "yesterday"),
        ("TIME", {"strategy": "uniform", "range": [0, 90_000_000]}, "outside the type"),
        ("INT", {"strategy": "zipf"}, "too many"),
        ("DOUBLE", {"strategy": "zipf"}, "needs a range"),
        ("VARCHAR", {"strategy": "uniform", "range": [-1, 5]}, "outside the type"),
        ("BIGINT NOT NULL", {"null_percentage": 5}, "NOT NULL"),
        ("BIGINT NOT NULL", {"values": []}, "NOT NULL"),
    ],
)
def test_settings_that_do_not_fit_the_column_are_rejected(
    column: str, settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message) as err:
        transport(one_plan(col=settings), table(col=column))
    assert "'col'" in str(err.value)


def test_decimal_range_must_fit_the_precision() -> None:
    with pytest.raises(ValueError, match="outside the type"):
        transport(
            one_plan(x={"strategy": "uniform", "range": [0, 1000]}),
            table(x=SqlType("DECIMAL", 4, 2)),
        )
