"""Errors that end a command with a clear one-line message.

``UsageError`` is bad input (exit code 2): raised before anything runs or is stored.
"""


class UsageError(Exception):
    """Bad input: the CLI prints ``error: <message>`` and exits with code 2."""

    exit_code = 2
