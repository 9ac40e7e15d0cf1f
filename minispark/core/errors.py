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


def out_of_memory(exc: BaseException) -> str | None:
    """The one-line error for an allocation this machine cannot make (torch's CPU allocator and CUDA report
    it as a RuntimeError, Python as a MemoryError), or None for any other exception."""
    text = first_line(exc)
    if isinstance(exc, MemoryError) or "can't allocate memory" in text or type(exc).__name__ == "OutOfMemoryError":
        return (f"out of memory ({text}); the sizes asked for (a recipe's, a batch) need more memory than this "
                "machine has: use smaller ones (`minispark train --dry-run` predicts a recipe's peak)")
    return None


def json_reason(exc: BaseException) -> str:
    """Why JSON (or TOML) text could not be read, in words a user can act on: Python refuses an integer of more
    than 4300 digits with advice to raise its own limit (``sys.set_int_max_str_digits``), which no user can take."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    text = first_line(exc)
    if isinstance(exc, ValueError) and "integer string conversion" in text:
        return "a number too long to read (more than 4300 digits)"
    return text


class DuplicateKey(ValueError):
    """A JSON object gave one key twice (``unique_keys``); its argument is the key."""


def unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """``json.loads``'s ``object_pairs_hook`` refusing a key given twice (``{"prompt": "a", "prompt": "b"}``):
    JSON keeps the last one without a word, so the one meant may not be the one used."""
    record: dict[str, object] = {}
    for key, value in pairs:
        if key in record:
            raise DuplicateKey(key)
        record[key] = value
    return record
