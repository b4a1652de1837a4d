"""``_fs.remove_tree`` beside another process removing the same staging folder.

Azure's batch delete fails ("Failed to delete blobs") for the blobs another retry of the
batch deleted between the listing and the delete; CI saw the Parquet sink's concurrent
publishers fail that way on Azurite. The race cannot be produced on demand by a real
store, so a filesystem wrapper injects it: the other process's delete happens, then the
store's error is raised.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyarrow import fs as pafs

from airflow_connectors.sinks import _fs


def _raced(lost: int, keep_one: bool = False) -> tuple[pafs.PyFileSystem, _Handler]:
    """A local filesystem whose first ``lost`` ``delete_dir`` calls lose the race: the
    folder is removed (by "the other publisher", unless ``keep_one``) and Azure's error
    is raised."""
    handler = _Handler(pafs.LocalFileSystem(), lost, keep_one)
    return pafs.PyFileSystem(handler), handler


class _Handler(pafs.FileSystemHandler):
    def __init__(self, real: pafs.LocalFileSystem, lost: int, keep_one: bool) -> None:
        self.real, self.lost, self.keep_one, self.calls = real, lost, keep_one, 0

    def delete_dir(self, path: str) -> None:
        self.calls += 1
        if self.calls <= self.lost:
            if not self.keep_one:
                self.real.delete_dir(path)
            raise OSError(f"Failed to delete blobs: [{path}/rows/part-1.parquet]")
        self.real.delete_dir(path)

    # What remove_tree and the selector need, from the real filesystem.
    def get_type_name(self) -> str:
        return "raced"

    def get_file_info(self, paths):  # type: ignore[no-untyped-def]
        return self.real.get_file_info(paths)

    def get_file_info_selector(self, selector):  # type: ignore[no-untyped-def]
        return self.real.get_file_info(selector)

    def normalize_path(self, path: str) -> str:
        return path

    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other

    create_dir = delete_dir_contents = delete_root_dir_contents = delete_file = None  # type: ignore[assignment]
    move = copy_file = open_input_stream = open_input_file = None  # type: ignore[assignment]
    open_output_stream = open_append_stream = None  # type: ignore[assignment]


def _staging(tmp_path: Path) -> str:
    folder = tmp_path / "_staging" / "batch-0000000001-1"
    (folder / "rows").mkdir(parents=True)
    (folder / "rows" / "part-1.parquet").write_bytes(b"x")
    (folder / "_probe").write_bytes(b"")
    return str(folder)


def test_a_folder_the_other_publisher_removed_first_is_not_an_error(tmp_path: Path) -> None:
    folder = _staging(tmp_path)
    fs, handler = _raced(lost=1)
    _fs.remove_tree(fs, folder)
    assert not Path(folder).exists()
    assert handler.calls == 1  # listed empty after the error: nothing to try again


def test_a_delete_that_failed_with_blobs_left_is_tried_again(tmp_path: Path) -> None:
    folder = _staging(tmp_path)
    fs, handler = _raced(lost=2, keep_one=True)
    _fs.remove_tree(fs, folder)
    assert not Path(folder).exists()
    assert handler.calls == 3


@pytest.mark.slow
def test_a_folder_that_cannot_be_removed_is_still_an_error(tmp_path: Path) -> None:
    folder = _staging(tmp_path)
    fs, handler = _raced(lost=99, keep_one=True)
    with pytest.raises(OSError, match="Failed to delete blobs"):
        _fs.remove_tree(fs, folder)
    assert Path(folder, "rows", "part-1.parquet").exists()
    assert handler.calls == 5
