"""The errors a user can fix, and the one-line guard every script's main runs under."""

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
    did not handle with 130. Anything else is a bug: its traceback is the report."""
    try:
        main(sys.argv[1:] if argv is None else argv)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
