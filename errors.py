"""The errors a user can fix, and the one-line guard every script's main runs under."""

import os
import select
import signal
import sys
import typing


class UserError(ValueError):
    """A mistake the user can fix (an option, a file, the data); the message names it and the fix.
    main_guard prints these as one line; any other exception is a bug and keeps its traceback."""


class OfflineError(UserError, ConnectionError):
    """A download that failed (no network, a closed proxy); the message names the local alternative."""


class OptionError(UserError):
    """A bad option, config file or value; the message says which and what would be valid."""


def main_guard(main: typing.Callable[[list[str]], object], argv: list[str] | None = None) -> None:
    """Run a script's main; a UserError ends it with its message alone and exit status 2, a Ctrl-C that main
    did not handle with 130, a reader of its output that went away (`| head -1`) quietly with 141, as SIGPIPE
    ends other commands. Anything else is a bug: its traceback is the report."""
    try:
        main(sys.argv[1:] if argv is None else argv)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        release_stdout()
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        release_stdout()
        sys.exit(130)
    except BrokenPipeError:
        if not _reader_gone(sys.stdout) and not _reader_gone(sys.stderr):
            raise  # another pipe (a worker's, a socket): a bug
        silence_stdout()
        sys.exit(128 + signal.SIGPIPE)
    except SystemExit:  # --help, or a script's own status: what it printed may still be buffered
        if release_stdout():
            sys.exit(128 + signal.SIGPIPE)
        raise
    if release_stdout():
        sys.exit(128 + signal.SIGPIPE)


def release_stdout() -> bool:
    """Flush stdout now; True when its reader has gone, and stdout then points at /dev/null: at exit Python
    flushes it again, into the closed pipe, printing 'Exception ignored ... BrokenPipeError' (status 120)."""
    try:
        sys.stdout.flush()
        return False
    except BrokenPipeError:
        if not _reader_gone(sys.stdout):
            raise
    silence_stdout()
    return True


def silence_stdout() -> None:
    """Point stdout at /dev/null: its reader has gone, and what is still printed (or flushed at exit) goes nowhere."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _reader_gone(stream: typing.TextIO) -> bool:
    """Whether stream is a pipe whose reading end is closed (poll reports an error on its writing end)."""
    try:
        poller = select.poll()
        poller.register(stream.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), a stream without a file descriptor
        return False
