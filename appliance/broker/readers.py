"""Read-only access to the partitions' files from a network worker.

Network workers never write a partition; they read the segment files (through the storage
library's read-only :class:`~appliance.storage.reader.LogReader`) to answer Fetch and ListOffsets,
bounded by the high watermark the owning disk worker publishes in the shared table. Open files are
cached so a fetch costs a dict lookup and a ``sendfile``, not an ``open``. They are closed on a
thread (:class:`~appliance.storage.file_remover.FileRemover`): the last close of a deleted
segment frees its page cache, which for a big one held this worker's loop (perf/bench_delete_stall.py).
"""

from __future__ import annotations

import collections
import contextlib
import os
from functools import partial
from typing import BinaryIO

from appliance.storage.file_remover import FileRemover
from appliance.storage.log_dir import read_topic_properties
from appliance.storage.reader import LogReader
from appliance.storage.segment import LogSegment

__all__ = ["Readers"]

MAX_OPEN_FILES = 512  # per network worker; an LRU beyond it (segments of cold partitions close)
CLOSE_WAIT_S = 5.0  # at close, for the closes queued on the thread (the process exits after)


class Readers:
    def __init__(self, log_dirs: list[str]) -> None:
        self.log_dirs = log_dirs
        self._readers: dict[tuple[int, str, int], LogReader] = {}
        self._files: collections.OrderedDict[str, BinaryIO] = collections.OrderedDict()
        self.closer = FileRemover("network worker readers")

    def reader(self, disk: int, topic: str, partition: int) -> LogReader:
        key = (disk, topic, partition)
        r = self._readers.get(key)
        if r is None:
            r = LogReader(os.path.join(self.log_dirs[disk], f"{topic}-{partition}"),
                          close_segment=self._close_segment)
            self._readers[key] = r
        return r

    def forget(self, topic: str) -> None:
        """Drop cached readers of a deleted topic."""
        for key in [k for k in self._readers if k[1] == topic]:
            with contextlib.suppress(Exception):
                self._readers.pop(key).close()
        # a re-created topic reuses the same paths: never serve the old inodes
        marker = os.sep + topic + "-"
        for path in [p for p in self._files if marker in p]:
            self.invalidate_file(path)

    def forget_partition(self, disk: int, topic: str, partition: int) -> None:
        """Drop the cached files of a partition whose log dir went offline: when the dir comes
        back (a new mount), reads must open the new files, not the dead file system's."""
        r = self._readers.pop((disk, topic, partition), None)
        if r is not None:
            with contextlib.suppress(Exception):
                r.close()
        prefix = os.path.join(self.log_dirs[disk], f"{topic}-{partition}") + os.sep
        for path in [p for p in self._files if p.startswith(prefix)]:
            self.invalidate_file(path)

    def offset_for_timestamp(self, disk: int, topic: str, partition: int, ts: int,
                             log_start: int, bound: int) -> tuple[int, int] | None:
        """ListOffsets by time: see :meth:`LogReader.offset_for_timestamp`."""
        return self.reader(disk, topic, partition).offset_for_timestamp(ts, log_start, bound)

    def max_timestamp(self, disk: int, topic: str, partition: int, log_start: int,
                      bound: int) -> tuple[int, int] | None:
        """ListOffsets' MAX_TIMESTAMP: see :meth:`LogReader.max_timestamp`."""
        return self.reader(disk, topic, partition).max_timestamp(log_start, bound)

    def offsets_before(self, disk: int, topic: str, partition: int, ts: int, max_num: int,
                       log_start: int, bound: int, now_ms: int) -> list[int]:
        """ListOffsets v0: see :meth:`LogReader.offsets_before`."""
        return self.reader(disk, topic, partition).offsets_before(ts, max_num, log_start, bound, now_ms)

    def topic_overrides(self, disk: int, topic: str) -> dict[str, str]:
        """The topic's config overrides as saved beside its partition 0 (or the first found)."""
        return read_topic_properties(os.path.join(self.log_dirs[disk], f"{topic}-0"))

    def file(self, path_or_fd: str | int) -> BinaryIO:
        """An open file object for sendfile (cached; LRU-closed past MAX_OPEN_FILES).

        An int is a LogReader segment's descriptor: wrapped without taking ownership (the reader
        keeps it open at least its retire delay after the segment is deleted or swapped, far
        longer than a response waits to be written)."""
        if isinstance(path_or_fd, int):
            return os.fdopen(path_or_fd, "rb", closefd=False)
        f = self._files.get(path_or_fd)
        if f is not None:
            # The log cleaner swaps a cleaned segment in under the same name: never serve
            # positions of the new file from the old inode.
            try:
                same = os.stat(path_or_fd).st_ino == os.fstat(f.fileno()).st_ino
            except FileNotFoundError:
                same = True  # renamed .deleted: the open file is still the right one
            if same:
                self._files.move_to_end(path_or_fd)
                return f
            self.invalidate_file(path_or_fd)
        f = open(path_or_fd, "rb")  # noqa: SIM115 - cached, closed on eviction
        self._files[path_or_fd] = f
        if len(self._files) > MAX_OPEN_FILES:
            _, old = self._files.popitem(last=False)
            self.closer.call(old.close)
        return f

    def invalidate_file(self, path: str) -> None:
        f = self._files.pop(path, None)
        if f is not None:
            self.closer.call(f.close)

    def close(self) -> None:
        for r in self._readers.values():
            with contextlib.suppress(Exception):
                r.close()
        for f in self._files.values():
            self.closer.call(f.close)
        self._readers.clear()
        self._files.clear()
        self.closer.shutdown(CLOSE_WAIT_S)

    def _close_segment(self, seg: LogSegment) -> None:
        self.closer.call(partial(seg.close, trim=False))
