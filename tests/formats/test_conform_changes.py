"""conform() of change records: a keyed table keeps __op/__set and asks NOT NULL values
only where a change carries them; a table without a key refuses deletes."""

from __future__ import annotations

import pyarrow as pa
import pytest

from airflow_connectors.changes import DELETE, OP, SET, TRUNCATE, UPDATE, UPSERT
from airflow_connectors.formats._conform import RowError, conform
from airflow_connectors.spec.models import ColumnSpec, TableSpec
from airflow_connectors.spec.types import parse_type


def _table(keyed: bool) -> TableSpec:
    cols = [("id", "BIGINT", False), ("name", "VARCHAR", False), ("n", "INT", True)]
    return TableSpec(
        name="people",
        columns=[ColumnSpec(name=c, type=parse_type(t)[0], nullable=nl) for c, t, nl in cols],
        primary_key=["id"] if keyed else [],
        sink={"name": "delta"},
    )


def _data(rows: list[dict[str, object]]) -> pa.Table:
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("name", pa.string()),
            ("n", pa.int64()),
            (OP, pa.int8()),
            (SET, pa.list_(pa.string())),
        ]
    )
    return pa.Table.from_pylist([{SET: None, **r} for r in rows], schema=schema)


def test_keyed_table_keeps_the_operations_and_waives_not_null_for_deletes() -> None:
    table = _table(keyed=True)
    out = conform(
        _data(
            [
                {"id": 1, "name": "a", "n": 1, OP: UPSERT},
                {"id": 2, OP: DELETE},
                {"id": 3, "n": 5, OP: UPDATE, SET: ["n"]},
                {OP: TRUNCATE},
            ]
        ),
        table,
        table.arrow_schema(),
    )
    assert out.column_names == ["id", "name", "n", OP, SET]
    assert out.column(OP).to_pylist() == [UPSERT, DELETE, UPDATE, TRUNCATE]
    assert out.column(SET).to_pylist() == [None, None, ["n"], None]
    assert out.schema.field("n").type == pa.int32()
    # A truncate's key and a delete's NOT NULL columns are null: staged nullable.
    assert out.schema.field("id").nullable and out.schema.field("name").nullable


@pytest.mark.parametrize(
    ("row", "column"),
    [
        ({"id": 1, "n": 1, OP: UPSERT}, "name"),  # an upsert carries every NOT NULL column
        ({"name": "x", OP: DELETE}, "id"),  # every change but a truncate carries the key
        ({"id": 1, OP: UPDATE, SET: ["name"]}, "name"),  # a column the update sets
    ],
)
def test_keyed_table_refuses_a_missing_value_the_change_carries(
    row: dict[str, object], column: str
) -> None:
    table = _table(keyed=True)
    with pytest.raises(RowError, match=f"column '{column}' is NOT NULL"):
        conform(_data([{"id": 9, "name": "ok", OP: UPSERT}, row]), table, table.arrow_schema())


def test_rows_without_operations_are_upserts_into_a_keyed_table() -> None:
    table = _table(keyed=True)
    data = pa.table({"id": [1, 2], "name": ["a", "b"]})
    out = conform(data, table, table.arrow_schema())
    assert out.column(OP).to_pylist() == [UPSERT, UPSERT]


def test_unkeyed_table_appends_inserts_and_refuses_a_delete() -> None:
    table = _table(keyed=False)
    ok = conform(_data([{"id": 1, "name": "a", OP: UPSERT}]), table, table.arrow_schema())
    assert ok.column_names == ["id", "name", "n"]
    with pytest.raises(RowError, match="no primary key") as e:
        conform(
            _data([{"id": 1, "name": "a", OP: UPSERT}, {"id": 1, "name": "a", OP: DELETE}]),
            table,
            table.arrow_schema(),
        )
    assert e.value.row == 1


def test_rescue_mode_keeps_the_operations_of_a_keyed_table() -> None:
    from airflow_connectors.formats._conform import Evolution, conform_evolving
    from airflow_connectors.spec.models import RESCUED_DATA

    keyed = _table(keyed=True)
    table = keyed.model_copy(
        update={
            "columns": (
                *keyed.columns,
                ColumnSpec(name=RESCUED_DATA, type=parse_type("VARCHAR")[0]),
            ),
            "schema_evolution": "rescue",
        }
    )
    data = _data([{"id": 1, "name": "a", "n": 1, OP: UPSERT}, {"id": 2, OP: DELETE}])
    data = data.append_column("extra", pa.array(["x", None]))
    out = conform_evolving(data, table, table.arrow_schema(), Evolution("rescue"))
    assert out.column(OP).to_pylist() == [UPSERT, DELETE]
    assert out.column(RESCUED_DATA).to_pylist() == ['{"extra": "x"}', None]
    with pytest.raises(RowError, match="NOT NULL but an upsert record"):
        conform_evolving(
            _data([{"id": 3, OP: UPSERT}]), table, table.arrow_schema(), Evolution("rescue")
        )
