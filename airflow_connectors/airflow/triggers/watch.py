"""Wake polling triggers when something changes in local folders (Linux inotify).

A ``new_data`` trigger polls its source every ``poll_interval`` seconds; a trigger whose
transport names local folders (:meth:`~airflow_connectors.transports.base.Transport.watch_paths`)
also waits on :func:`watch`, which wakes it as soon as a file is written, renamed into
or touched below one of them (not when it is created, empty), so a new file is probed at
once instead of at the next poll. Polling goes on beside it: a network filesystem may deliver no events.

One inotify descriptor per event loop serves every trigger of the triggerer (no thread
per trigger: thousands of watched connectors cost one file descriptor and a watch per
folder), read on the loop itself (``add_reader``). Folders are watched with their
subfolders (new subfolders included), up to :data:`MAX_FOLDERS` per watched path. Where
inotify is missing (not Linux) or refuses (the ``fs.inotify.max_user_watches`` limit),
the trigger says so once and polls only.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import errno
import logging
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)

#: Subfolders watched per watched path at most (each is an inotify watch).
MAX_FOLDERS = 10_000

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE_SELF = 0x00000400
IN_IGNORED = 0x00008000
IN_ISDIR = 0x40000000
IN_Q_OVERFLOW = 0x00004000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
MASK = IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE_SELF
_EVENT = struct.Struct("iIII")


class WatchUnavailable(OSError):
    """inotify cannot watch here (not Linux, or a limit reached)."""


def _libc() -> ctypes.CDLL:
    name = ctypes.util.find_library("c")
    if not name:
        raise WatchUnavailable("no C library to call inotify through")
    libc = ctypes.CDLL(name, use_errno=True)
    if not hasattr(libc, "inotify_init1"):
        raise WatchUnavailable("this system has no inotify")
    return libc


class _Inotify:
    """One inotify descriptor on one event loop: watches folders (with their
    subfolders) for the registered roots and sets the roots' events on changes."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.libc = _libc()
        fd = self.libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise WatchUnavailable(os.strerror(ctypes.get_errno()))
        self.fd = fd
        #: watch descriptor -> folder, and back.
        self.folders: dict[int, str] = {}
        self.wds: dict[str, int] = {}
        #: root folder -> the events of the triggers watching it.
        self.roots: dict[str, list[asyncio.Event]] = {}
        loop.add_reader(fd, self._read)

    def close(self) -> None:
        self.loop.remove_reader(self.fd)
        os.close(self.fd)

    def add(self, root: str, event: asyncio.Event) -> None:
        """Watch ``root`` (and its subfolders) for ``event``."""
        if root not in self.roots:
            self._watch_tree(root)
        self.roots.setdefault(root, []).append(event)

    def remove(self, root: str, event: asyncio.Event) -> None:
        """Stop waking ``event``; a root nobody watches any more is let go."""
        events = self.roots.get(root, [])
        if event in events:
            events.remove(event)
        if not events:
            self.roots.pop(root, None)
            for folder in [f for f in self.wds if _under(f, root)]:
                if not any(_under(folder, r) for r in self.roots):
                    self.libc.inotify_rm_watch(self.fd, self.wds.pop(folder))

    def _watch_tree(self, top: str) -> None:
        self._watch(top)
        count = 1
        for folder, subfolders, _ in os.walk(top):
            for name in subfolders:
                if count >= MAX_FOLDERS:
                    log.warning(
                        "watching the first %d folders under %s only; changes deeper "
                        "are found by polling",
                        MAX_FOLDERS,
                        top,
                    )
                    return
                self._watch(os.path.join(folder, name))
                count += 1

    def _watch(self, folder: str) -> None:
        if folder in self.wds:
            return
        wd = self.libc.inotify_add_watch(self.fd, os.fsencode(folder), MASK)
        if wd < 0:
            code = ctypes.get_errno()
            if code in (errno.ENOENT, errno.ENOTDIR, errno.EACCES):
                return  # gone already, or not ours to watch: polling finds it
            raise WatchUnavailable(
                f"cannot watch {folder}: {os.strerror(code)}"
                + (" (raise fs.inotify.max_user_watches)" if code == errno.ENOSPC else "")
            )
        self.folders[wd] = folder
        self.wds[folder] = wd

    def _read(self) -> None:
        try:
            data = os.read(self.fd, 64 * 1024)
        except BlockingIOError:
            return
        changed: set[str] = set()
        overflow = False
        offset = 0
        while offset + _EVENT.size <= len(data):
            wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
            name = data[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0")
            offset += _EVENT.size + length
            if mask & IN_Q_OVERFLOW:
                overflow = True
                continue
            folder = self.folders.get(wd)
            if folder is None:
                continue
            if mask & IN_IGNORED:  # its folder is gone
                self.folders.pop(wd, None)
                self.wds.pop(folder, None)
            elif mask & IN_ISDIR and mask & (IN_CREATE | IN_MOVED_TO):
                try:  # a new subfolder: watched too, with what it holds already
                    self._watch_tree(os.path.join(folder, os.fsdecode(name)))
                except WatchUnavailable as e:
                    log.warning("%s; changes there are found by polling", e)
            elif mask & IN_CREATE:
                # A file just created is empty: a probe now would see it at size 0 (and,
                # with min_file_age 0, fire for it and again once written). Its write
                # and close wake the triggers; a hard link (a create only) waits for
                # the poll.
                continue
            changed.add(folder)
        for root, events in self.roots.items():
            if overflow or any(_under(folder, root) for folder in changed):
                for event in events:
                    event.set()


def _under(folder: str, root: str) -> bool:
    return folder == root or folder.startswith(root.rstrip("/") + "/")


_watchers: dict[asyncio.AbstractEventLoop, _Inotify] = {}


@contextmanager
def watch(paths: list[str], event: asyncio.Event) -> Iterator[None]:
    """Sets ``event`` whenever something changes below ``paths`` while the block runs
    (on the running loop). Raises :class:`WatchUnavailable` when inotify cannot watch
    them; then nothing is watched."""
    loop = asyncio.get_running_loop()
    watcher = _watchers.get(loop)
    if watcher is None:
        watcher = _watchers[loop] = _Inotify(loop)
    added: list[str] = []
    try:
        for path in paths:
            watcher.add(path, event)
            added.append(path)
    except BaseException:
        _release(watcher, added, event)
        raise
    try:
        yield
    finally:
        _release(watcher, added, event)


def _release(watcher: _Inotify, paths: list[str], event: asyncio.Event) -> None:
    for path in paths:
        watcher.remove(path, event)
    if not watcher.roots:  # nobody left on this loop
        _watchers.pop(watcher.loop, None)
        watcher.close()
