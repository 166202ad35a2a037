"""file-stats: count, size and newest change of the files in a folder (seed 002 §3.2)."""

from __future__ import annotations

import os
import time
from datetime import datetime

from bitong.agent.calling.allowlist import require


def run(path: str, recursive: bool = False, not_modified_days: int | None = None) -> dict:
    """Files directly in ``path`` (or below it, with ``recursive``); only those untouched for
    ``not_modified_days`` days when that is given. Symlinks are not followed."""
    real = require(path, "read", "path")
    if not os.path.isdir(real):
        raise NotADirectoryError(f"not a directory: {path}")
    cutoff = None if not_modified_days is None else time.time() - int(not_modified_days) * 86400
    count = size = skipped = 0
    newest: float | None = None
    pending = [real]
    while pending:
        folder = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            skipped += 1
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    if recursive:
                        pending.append(entry.path)
                    continue
                if not entry.is_file(follow_symlinks=False):
                    continue
                stat = entry.stat(follow_symlinks=False)
            except OSError:
                skipped += 1
                continue
            if cutoff is not None and stat.st_mtime > cutoff:
                continue
            count += 1
            size += stat.st_size
            newest = stat.st_mtime if newest is None else max(newest, stat.st_mtime)
    return {
        "directory": real,
        "recursive": bool(recursive),
        "not_modified_days": not_modified_days,
        "file_count": count,
        "total_bytes": size,
        "total_size_mb": round(size / 1024 / 1024, 2),
        "newest_modified": datetime.fromtimestamp(newest).astimezone().isoformat(timespec="seconds")
        if newest is not None else None,
        "unreadable_entries": skipped,
    }
