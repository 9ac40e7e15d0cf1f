"""The one exception type user-facing errors are raised as.

The CLI prints a ``MinisparkError`` as a single line (naming the file, line or flag at fault) and
exits non-zero; anything else is a bug and keeps its traceback.
"""


class MinisparkError(Exception):
    """A user-facing error with a one-line message."""
