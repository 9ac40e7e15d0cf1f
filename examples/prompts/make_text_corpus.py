"""Write ``text_docs.jsonl``: existing text for a teacher-forced cache (``minispark cache --source text``).

No conversation dataset is reachable here, so the "existing text" is the documentation already on
disk: the docstrings of Python's standard library. Each line is a user question about one public
function or class and, as the trailing assistant message, its docstring (first paragraphs, cut at a
paragraph boundary). The target never wrote these answers: training on them measures what
teacher-forced text is worth against the target's own regenerated answers (issue: a drafter that
generalizes). Deterministic for one Python version (the docstrings are the interpreter's own):

    .venv/bin/python examples/prompts/make_text_corpus.py        # rewrites text_docs.jsonl
"""

from __future__ import annotations

import importlib
import inspect
import json
import sys
from pathlib import Path

OUT = Path(__file__).with_name("text_docs.jsonl")
MODULES = ("argparse", "asyncio", "base64", "bisect", "calendar", "collections", "configparser", "contextlib",
           "copy", "csv", "dataclasses", "datetime", "decimal", "difflib", "email.message", "enum", "filecmp",
           "fnmatch", "fractions", "functools", "glob", "gzip", "hashlib", "heapq", "hmac", "html", "http.client",
           "imaplib", "inspect", "io", "ipaddress", "itertools", "json", "logging", "lzma", "mailbox",
           "math", "mimetypes", "operator", "os", "os.path", "pathlib", "pickle", "pprint", "queue",
           "random", "re", "secrets", "selectors", "shelve", "shlex", "shutil", "signal", "smtplib", "socket",
           "sqlite3", "statistics", "string", "struct", "subprocess", "tarfile", "tempfile", "textwrap",
           "threading", "time", "timeit", "tokenize", "traceback", "types", "typing", "unittest", "urllib.parse",
           "urllib.request", "uuid", "warnings", "weakref", "xml.etree.ElementTree", "zipfile", "zlib")
QUESTIONS = ("What does `{name}` in Python's `{module}` module do?",
             "Explain `{module}.{name}` and how to use it.",
             "I keep seeing `{name}` from `{module}` in code. What is it for?",
             "Can you describe the `{module}.{name}` API?")
MIN_CHARS, MAX_CHARS = 200, 1400


def trimmed(doc: str) -> str | None:
    """Whole paragraphs of ``doc`` up to MAX_CHARS; None when too short to teach anything."""
    out = ""
    for paragraph in doc.strip().split("\n\n"):
        if out and len(out) + len(paragraph) + 2 > MAX_CHARS:
            break
        out = f"{out}\n\n{paragraph}" if out else paragraph
    out = out[:MAX_CHARS]
    return out if len(out) >= MIN_CHARS else None


def documented(module_name: str) -> list[tuple[str, str]]:
    """(name, docstring) of the module's public functions and classes defined in it, by name."""
    module = importlib.import_module(module_name)
    rows = []
    for name, obj in sorted(vars(module).items()):
        if name.startswith("_") or not (inspect.isfunction(obj) or inspect.isclass(obj) or inspect.isbuiltin(obj)):
            continue
        if getattr(obj, "__module__", module_name) not in (module_name, f"_{module_name}"):
            continue  # re-exports are documented where they are defined
        doc = trimmed(inspect.getdoc(obj) or "")
        if doc:
            rows.append((name, doc))
    return rows


def main() -> None:
    lines, seen = [], set()
    for module_name in MODULES:
        for name, doc in documented(module_name):
            if doc in seen:
                continue
            seen.add(doc)
            question = QUESTIONS[len(lines) % len(QUESTIONS)].format(name=name, module=module_name)
            lines.append({"id": f"docs-{len(lines):05d}", "category": "docs",
                          "messages": [{"role": "user", "content": question},
                                       {"role": "assistant", "content": doc}]})
    OUT.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))
    print(f"{OUT}: {len(lines)} docstring answers (Python {sys.version.split()[0]})")


if __name__ == "__main__":
    main()
