"""Files written whole or not at all (model files, checkpoints, the command line's outputs): a
temporary file (or folder) beside the target, renamed over it."""
from __future__ import annotations

import os
import secrets


def write_whole(path: str, folder: str, content: bytes) -> None:
    """Write ``content`` to ``path`` through a temporary file of ``folder`` renamed over it
    (through a link: its target is written, the link stays)."""
    if os.path.islink(path):
        path = os.path.realpath(path)
        folder = os.path.dirname(path)
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


def write_through(path: str, writer, old_parts=None) -> None:
    """Call ``writer(temporary path)`` (a pandas writer of a file, or of a folder of parts),
    then put what it wrote in place of ``path`` (of the file or folder a link names): a file
    is renamed over it. A folder takes an old folder's place only where ``old_parts(folder)``
    names the old one's files (None: it holds something else, and nothing is replaced): the
    old folder is renamed aside, the new one renamed in, and those files removed, looked at
    again after the rename; anything else found there then stays in the renamed folder, with a
    warning naming it. On any failure what ``writer`` wrote is removed and ``path`` is left
    as it was."""
    import logging
    import shutil
    path = os.path.realpath(path)  # (through a link: its target gets the output)
    tmp = _temporary(path)
    try:
        writer(tmp)
        if os.path.isdir(tmp) and os.path.isdir(path):
            if old_parts is None or old_parts(path) is None:
                raise FileExistsError(f"{path!r} exists and holds more than an earlier "
                                      f"output's parts: not replaced")
            old = _temporary(path)
            os.replace(path, old)
            try:
                os.replace(tmp, path)
            except BaseException:
                os.replace(old, path)  # the old output back in place
                raise
            parts = old_parts(old) or []
            for name in parts:
                os.unlink(os.path.join(old, name))
            try:
                os.rmdir(old)
            except OSError:  # something besides the parts appeared: it stays
                logging.getLogger("gbflow").warning(
                    "the earlier output at %r held more than its parts; they are kept in %r",
                    path, old)
        else:
            os.replace(tmp, path)
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
        elif os.path.exists(tmp):
            os.unlink(tmp)
