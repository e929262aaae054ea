"""Files written whole or not at all (model files, checkpoints): a temporary file of the same
folder, flushed to disk, renamed over the target."""
from __future__ import annotations

import os
import secrets


def write_whole(path: str, folder: str, content: bytes) -> None:
    """Write ``content`` to ``path`` through a temporary file of ``folder`` renamed over it."""
    # A fresh name opened with "x" (never an existing file), with the umask's permissions
    # (tempfile.mkstemp would make the model file private to its owner).
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}."
                               f"{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "xb") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:  # never created, or already renamed
            pass
        if isinstance(e, Exception):
            e.add_note(f"save_model: {path!r} was not written (left as it was)")
        raise
