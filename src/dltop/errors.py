"""User-facing errors.

A :class:`UserError` is a mistake in what the user gave us (a profile, a flag,
a path). The CLI prints its message and exits with status 2, without a
traceback, before anything is written to the database.
"""


class UserError(Exception):
    """A problem with user input; the message names the file, the key and what was expected."""

    exit_code = 2
