"""Files written whole or not at all (model files, checkpoints, the command line's outputs): a
temporary file (or folder) beside the target, renamed over it."""
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


def _temporary(path: str) -> str:
    folder, name = os.path.split(os.path.abspath(path))
    return os.path.join(folder, f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def write_through(path: str, writer) -> None:
    """Call ``writer(temporary path)`` (a pandas writer of a file, or of a folder of parts),
    then put what it wrote in place of ``path`` (of the file or folder a link names): a file
    is renamed over it; a folder takes an old folder's place (the old one renamed aside, then
    removed), so no part of an earlier output is left among the new parts. The caller decides
    which old folder may go (``cli.check_writable``). On any failure what ``writer`` wrote is
    removed and ``path`` is left as it was."""
    import shutil
    path = os.path.realpath(path)  # (through a link: its target gets the output)
    tmp = _temporary(path)
    try:
        writer(tmp)
        if os.path.isdir(tmp) and os.path.isdir(path):
            old = _temporary(path)
            os.replace(path, old)
            try:
                os.replace(tmp, path)
            except BaseException:
                os.replace(old, path)  # the old output back in place
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
        elif os.path.exists(tmp):
            os.unlink(tmp)
