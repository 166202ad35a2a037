"""file-write: text into a file inside the tool's fs_write_paths, never half-written."""

from __future__ import annotations

import os
import tempfile

from bitong.agent.calling.allowlist import require


def write_file(path: str, content: str, mode: str = "overwrite") -> dict:
    """Write ``content`` (UTF-8) to ``path``: ``overwrite`` replaces it atomically, ``append`` adds to its end.

    Overwrite goes through a temporary file in the same folder, fsynced and
    renamed over the target, so a crash leaves the old file or the new one,
    never a mix; the file keeps its permission bits.
    """
    real = require(path, "write", "path")
    data = content.encode("utf-8")
    if mode == "append":
        with open(real, "ab") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    elif mode == "overwrite":
        folder = os.path.dirname(real)
        try:
            keep = os.stat(real).st_mode & 0o7777
        except FileNotFoundError:
            keep = None
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(real)}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            if keep is not None:
                os.chmod(tmp, keep)
            os.replace(tmp, real)
        except BaseException:
            os.unlink(tmp)
            raise
        _fsync_folder(folder)
    else:
        raise ValueError(f"mode must be overwrite or append, not {mode!r}")
    return {"path": real, "mode": mode, "bytes_written": len(data), "size": os.path.getsize(real)}


def _fsync_folder(folder: str) -> None:
    """Make the rename itself durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
