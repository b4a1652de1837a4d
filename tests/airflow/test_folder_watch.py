"""The inotify watcher that wakes ``new_data`` triggers (``triggers/watch.py``), against
real folders: one descriptor per event loop for every watching trigger, subfolders
(also ones made later) watched, roots let go when their last trigger stops."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from airflow_connectors.airflow.triggers import watch as watching


async def woken(event: asyncio.Event, within: float = 5.0) -> bool:
    try:
        await asyncio.wait_for(event.wait(), within)
    except TimeoutError:
        return False
    event.clear()
    return True


def test_changes_below_a_watched_folder_wake_its_triggers_only(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    (a / "deep").mkdir(parents=True)
    b.mkdir()

    async def scenario() -> None:
        ea, eb = asyncio.Event(), asyncio.Event()
        with watching.watch([str(a)], ea), watching.watch([str(b)], eb):
            # One inotify descriptor serves both triggers of this loop.
            assert len(watching._watchers) == 1
            staged = tmp_path / "staged.csv"
            staged.write_text("id\n1\n")
            staged.rename(a / "one.csv")  # renamed in
            assert await woken(ea) and not eb.is_set()
            (a / "deep" / "two.csv").write_text("id\n2\n")  # in a subfolder
            assert await woken(ea)
            (a / "later").mkdir()  # a subfolder made after the watch began
            assert await woken(ea)
            await asyncio.sleep(0.05)
            ea.clear()
            (a / "later" / "three.csv").write_text("id\n3\n")
            assert await woken(ea)
            (b / "x.csv").write_text("id\n")
            assert await woken(eb)
            # Nothing changed: no wake-up.
            assert not await woken(ea, within=0.3)
        assert watching._watchers == {}  # the descriptor is closed with the last trigger

    asyncio.run(scenario())


def test_a_file_wakes_once_written_not_while_it_is_created_empty(tmp_path: Path) -> None:
    """A file created in place is empty until its writer writes: creating it wakes no
    trigger (a probe then would see it at size 0 and fire for it twice); its write does."""

    async def scenario() -> None:
        event = asyncio.Event()
        with watching.watch([str(tmp_path)], event):
            fd = os.open(tmp_path / "a.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            try:
                assert not await woken(event, within=0.3), "an empty new file woke a trigger"
                os.write(fd, b'{"id": 1}\n')
                assert await woken(event)
            finally:
                os.close(fd)

    asyncio.run(scenario())


def test_a_root_is_let_go_when_its_last_trigger_stops(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()

    async def scenario() -> None:
        first, second = asyncio.Event(), asyncio.Event()
        with watching.watch([str(tmp_path)], first):
            with watching.watch([str(tmp_path)], second):
                watcher = next(iter(watching._watchers.values()))
                folders = set(watcher.wds)
                assert folders == {str(tmp_path), str(tmp_path / "sub")}
            # The other trigger still watches: the folders stay watched.
            assert set(watcher.wds) == folders
            (tmp_path / "sub" / "a.json").write_text("{}\n")
            assert await woken(first) and not second.is_set()
        assert watching._watchers == {}

    asyncio.run(scenario())


def test_a_missing_folder_is_not_watched_and_not_an_error(tmp_path: Path) -> None:
    async def scenario() -> None:
        event = asyncio.Event()
        with watching.watch([str(tmp_path / "not-there")], event):
            watcher = next(iter(watching._watchers.values()))
            assert watcher.wds == {}
        assert watching._watchers == {}

    asyncio.run(scenario())
    assert os.path.isdir(tmp_path)
