"""Files a later step reads are written whole or not at all, and one training owns an out_dir at a time.

Every such file is written to a temporary file beside it (name.XXXX.tmp), flushed to disk, then renamed over
it: a crash, a full disk or a kill -9 leaves the old file as it was. A kill -9 can leave the temporary file
behind; remove_stale_temps clears those at the next start.
"""

import contextlib
import hashlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from errors import UserError

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; a second training there is not refused
    fcntl = None

LOCK_FILE = "train.lock"


def temp_pattern(path: Path) -> str:
    """The glob that matches the temporary files atomic_files makes for path."""
    return f"{path.name}*.tmp"


def special_file_kind(path: Path) -> str | None:
    """What a path is that exists but is neither a folder nor a regular file: a device (/dev/null reads as
    empty, /dev/zero without end), a pipe or a socket; None for anything else."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a pipe"
    return "a socket" if stat.S_ISSOCK(mode) else None


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, read a MiB at a time (a dataset's .bin may not fit in memory)."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_files(*paths: str | os.PathLike) -> Iterator[list[Path]]:
    """Temporary paths to write, one beside each path; if the block succeeds they replace the paths in order.

    If it fails, the temporary files are removed and every path keeps its old content. The renames come one
    after another, after every file is complete: a crash between two of them can mix old and new files, which
    is why the readers of a group (tokenizer.json with its .bin files) check that the files agree.
    """
    paths = [Path(p) for p in paths]
    temps = []
    umask = os.umask(0)  # reading the umask means setting it; put back at once
    os.umask(umask)
    try:
        for path in paths:
            path.parent.mkdir(parents=True, exist_ok=True)
            handle, name = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
            os.close(handle)
            temps.append(Path(name))
            os.chmod(name, 0o666 & ~umask)  # what open() would give; mkstemp's 0600 hides results from others
        yield temps
        for temp in temps:
            _fsync(temp)
        for temp, path in zip(temps, paths, strict=True):
            os.replace(temp, path)
    except OSError as e:  # a full disk, a file size limit, a folder that cannot be written
        names = ", ".join(str(path) for path in paths)
        kept = "the previous content is kept" if any(path.exists() for path in paths) else "nothing was written"
        raise UserError(f"could not write {names}: {e.strerror or e}; {kept}") from None
    finally:
        for temp in temps:
            temp.unlink(missing_ok=True)
    for directory in {path.parent for path in paths}:
        with contextlib.suppress(OSError):  # some file systems cannot sync a folder; the renames stand
            _fsync(directory)


def remove_stale_temps(folder: Path, names: tuple[str, ...]) -> list[Path]:
    """Delete the temporary files that a killed writer of these names left in folder; returns them."""
    stale = [temp for name in names for temp in folder.glob(temp_pattern(folder / name))]
    for temp in stale:
        temp.unlink(missing_ok=True)
    return stale


@contextlib.contextmanager
def replace_files(folder: Path, names: tuple[str, ...]) -> Iterator[list[Path]]:
    """atomic_files for the files names in folder, after removing the temporary files that a killed writer of
    them left there."""
    if folder.is_dir():
        remove_stale_temps(folder, names)
    with atomic_files(*(folder / name for name in names)) as temps:
        yield temps


def hold_lock(path: Path, stack: contextlib.ExitStack, wait: bool = False) -> str | None:
    """Take an exclusive lock on the file path (made if missing) until the stack closes or the process dies,
    whatever kills it; None when taken, else the process id its holder wrote there. wait: block until it is free
    (a signal handler that raises still interrupts the wait)."""
    if fcntl is None:
        return None
    try:
        file = stack.enter_context(path.open("a+"))
    except OSError as e:  # a read-only folder or file system, a path under a file
        raise UserError(f"cannot write the lock {path}: {e.strerror or e}; choose a folder that can be written"
                        ) from None
    try:
        fcntl.flock(file.fileno(), fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        file.seek(0)
        return file.read().strip() or "another process"
    except OSError as e:  # a file system without locks (some network mounts)
        raise UserError(f"cannot lock {path}: {e.strerror or e}; use a local folder or one mounted with locks"
                        ) from None
    stack.callback(fcntl.flock, file.fileno(), fcntl.LOCK_UN)
    file.seek(0)
    file.truncate()
    file.write(str(os.getpid()))
    file.flush()
    return None


def lock_folder(folder: Path, stack: contextlib.ExitStack) -> None:
    """Hold an exclusive lock on folder until the stack closes (or the process dies, whatever kills it).

    A second process asking for it gets a UserError at once, naming the process that holds it.
    """
    path = folder / LOCK_FILE
    holder = hold_lock(path, stack)
    if holder is not None:
        raise UserError(f"out_dir {str(folder)!r} is in use by a training already running (process {holder} "
                        f"holds {path}); wait for it to finish, or choose another --out_dir")


def write_atomic(path: Path, text: str) -> None:
    """Write to a temporary file beside path, then rename: a reader never sees half a file."""
    with atomic_files(path) as (temp,):
        temp.write_text(text)
