"""Writing a file the user named (`report --html OUT`, `export -o OUT`) without following a link
planted in its place: a symlink in /tmp owned by another user must not turn root's report into
an overwrite of /etc/passwd.

The output is written to a new file created next to OUT (O_EXCL, a name nobody can guess) and
renamed onto OUT when complete. A rename replaces the name OUT, never what a symlink there
points to; in a sticky directory (/tmp) it fails on another user's file, which is then said.
A reader of OUT sees the old file or the whole new one, never half of it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from gputop.errors import GputopError


@contextlib.contextmanager
def replacing(out: str | os.PathLike[str]) -> Iterator[str]:
    """A path to write `out`'s content to; it becomes `out` when the block ends without an
    error, and is removed otherwise. GputopError says why `out` cannot be written."""
    target = Path(out)
    if target.is_dir():
        raise GputopError(f"cannot write {out}: it is a directory")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part",
                                   dir=target.parent if str(target.parent) else ".")
    except OSError as e:
        raise GputopError(f"cannot write {out}: {e.strerror or e}") from None
    try:
        umask = os.umask(0o022)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # as open() would have made it
        os.close(fd)
        yield tmp
        os.replace(tmp, target)
    except OSError as e:
        _remove(tmp)
        raise GputopError(f"cannot write {out}: {e.strerror or e}") from None
    except BaseException:
        _remove(tmp)
        raise


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


__all__ = ["replacing"]
