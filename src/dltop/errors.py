"""The errors dltop reports to people, each with its exit status.

Every error meant for the user derives from :class:`DltopError`; the CLI prints
its message as one line (no traceback) and exits with its ``exit_code``:

- :class:`UserError` (2): a mistake in what the user gave us (a profile, a
  flag, a path, the config file), found *before anything was written*.
- :class:`SetupError` (1): the environment let us down while doing the work
  (pip or apt-get failed, a background engine did not start). Input may have
  been fine and something may already be on disk.

A failure in the middle of a campaign is neither: it ends that run (stored with
its status and reason) or the engine, never the process with status 2.
"""


class DltopError(Exception):
    """A failure with a message written for the user; the CLI exits with ``exit_code``."""

    exit_code = 1


class UserError(DltopError):
    """A problem with user input; the message names the file, the key and what was expected."""

    exit_code = 2


class SetupError(DltopError):
    """A step that needs the environment failed (pip, apt-get, starting an engine)."""

    exit_code = 1
