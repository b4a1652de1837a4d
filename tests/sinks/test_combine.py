"""Which staged parts the engine combines before a commit (:mod:`airflow_connectors.
sinks.combine`): each kind is held to ``1 + bytes read / target_file_size`` files with
the fewest and smallest parts rewritten. The engine end to end (every sink, the crash
in the middle) is in tests/engine/test_packing.py and test_exactly_once.py."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_connectors.sinks import _fs
from airflow_connectors.sinks.combine import _combine, _small

TARGET = 1000  # bytes; a part under 250 is small


def parts(folder: Path, sizes: list[int]) -> list[str]:
    """Files of the given sizes named as parts (their bytes do not matter to the choice)."""
    folder.mkdir(parents=True, exist_ok=True)
    for n, size in enumerate(sizes):
        (folder / f"part-{n:05d}.parquet").write_bytes(b"x" * size)
    (folder / ".part-00099.parquet.tmp").write_bytes(b"x")  # a writer's temporary: no part
    return [str(folder / f"part-{n:05d}.parquet") for n in range(len(sizes))]


def chosen(folder: Path, read_bytes: int | None) -> list[int]:
    fs, path = _fs.filesystem(str(folder))
    found = _small(fs, path, TARGET, read_bytes)
    return [int(p.rsplit("-", 1)[1].removesuffix(".parquet")) for p in found]


def test_parts_within_the_bound_stay(tmp_path: Path) -> None:
    parts(tmp_path, [200] * 5)
    assert chosen(tmp_path, read_bytes=4000) == []  # 5 parts <= 1 + 4000 / 1000


def test_the_fewest_smallest_parts_that_meet_the_bound(tmp_path: Path) -> None:
    parts(tmp_path, [200, 120, 240, 100, 230])
    # 1 + 1000 / 1000 = 2 files allowed: four of the five become one, the smallest four.
    assert chosen(tmp_path, read_bytes=1000) == [0, 1, 3, 4]
    assert chosen(tmp_path, read_bytes=0) == [0, 1, 2, 3, 4]  # all (1 file allowed)


def test_parts_that_are_not_small_stay_and_the_rewrite_is_bounded(tmp_path: Path) -> None:
    parts(tmp_path / "a", [300, 100, 50, 900])
    assert chosen(tmp_path / "a", read_bytes=0) == [1, 2]  # 300 and 900 are not small
    parts(tmp_path / "b", [240] * 6)
    assert chosen(tmp_path / "b", read_bytes=0) == [0, 1, 2, 3]  # 4 x 240 <= 1000 bytes
    # Dead letters (read_bytes None): the bound is by the parts' own size.
    parts(tmp_path / "c", [100, 100, 100])
    assert chosen(tmp_path / "c", read_bytes=None) == [0, 1, 2]


@pytest.mark.parametrize("compression", ["snappy", "zstd"])
def test_combined_file_holds_the_parts_rows_in_order(tmp_path: Path, compression: str) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("s", pa.string())])
    for n in range(3):
        ids = list(range(n * 10, n * 10 + 10))
        table = pa.table({"id": ids, "s": [f"s{i}" for i in ids]}, schema=schema)
        pq.write_table(table, tmp_path / f"part-{n:05d}.parquet")
    sizes = sum(p.stat().st_size for p in tmp_path.glob("*.parquet"))
    assert _combine(str(tmp_path), 1 << 20, compression, read_bytes=100) == (3, sizes)
    [combined] = [p.name for p in tmp_path.iterdir()]
    assert combined == "part-00000-combined.parquet"
    data = pq.read_table(tmp_path / combined)
    assert data.schema == schema  # NOT NULL kept
    assert data.column("id").to_pylist() == list(range(30))
    assert pq.ParquetFile(tmp_path / combined).metadata.row_group(0).column(0).compression == (
        compression.upper()
    )
