"""Files a run cannot write, for the tests of its one-line errors.

A read-only mode does not stop a run from replacing a file (it writes a temporary file and renames
it over the old one, which only needs the directory to be writable), and root ignores modes anyway.
:func:`immutable` sets the immutable attribute (``chattr +i``), which stops every user, root
included, from replacing, renaming or deleting the file, and always clears it afterwards.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import subprocess
from collections.abc import Iterator

__all__ = ["immutable"]


@contextlib.contextmanager
def immutable(path: str | os.PathLike) -> Iterator[bool]:
    """Makes the existing file ``path`` immutable for the block.

    Yields:
      Whether it worked: False where it cannot (``chattr`` missing, not root, or a file system
      without the attribute); the caller skips its test then.
    """
    chattr = shutil.which("chattr")
    path = pathlib.Path(path)
    done = (
        chattr is not None
        and subprocess.run([chattr, "+i", str(path)], capture_output=True).returncode == 0
    )
    try:
        yield done
    finally:
        if done:
            subprocess.run([chattr, "-i", str(path)], check=True, capture_output=True)
