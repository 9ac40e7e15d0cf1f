"""The one exception type user-facing errors are raised as.

The CLI prints a ``MinisparkError`` as a single line (naming the file, line or flag at fault) and
exits non-zero; anything else is a bug and keeps its traceback.
"""


class MinisparkError(Exception):
    """A user-facing error with a one-line message."""


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message (its type's name when it has none): what a one-line error quotes."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
