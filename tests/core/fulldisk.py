"""A text file that fills up: writes raise ``OSError(ENOSPC)`` once ``capacity`` characters are stored."""

from __future__ import annotations

import errno
import io
import os


class FullDisk(io.StringIO):
    """Stands in for an open text file on a disk with ``capacity`` characters free (what fit is kept)."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity

    def write(self, s: str) -> int:
        room = self.capacity - len(self.getvalue())
        if len(s) > room:
            super().write(s[:max(room, 0)])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return super().write(s)
