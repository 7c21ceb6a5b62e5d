"""The one exception the ``corral`` client raises for anything the user can fix.

Every failure a user can meet (portal unreachable, token rejected, unknown job, a field the portal refused, an
unreadable config file) becomes a :class:`CliError` whose message is a finished sentence. The commands print it as
one ``error: ...`` line on stderr and exit non-zero, so scripts get an exit code and people never see a traceback.
"""

from __future__ import annotations


class CliError(Exception):
    """A failure to report as one line. ``exit_code`` follows the shell's habit: 1 for errors, 2 for bad usage.

    ``transient`` marks failures that may go away by themselves (portal unreachable, timed out, HTTP 5xx), so a
    long-running ``logs -f`` can ride out a portal restart instead of dying on the first refused connection.
    """

    def __init__(self, message: str, *, exit_code: int = 1, transient: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.transient = transient

    def __str__(self) -> str:
        return self.message
