"""The ``minispark`` command line, one module per command family on one typer app:

    app.py       the app, its global options, the help classes, one-line errors, shared options and helpers,
                 ``run`` (the console entry point, ``minispark.cli:run``)
    decode.py    generate, chat, serve, demo
    data.py      cache, answers, cache-mix, train
    measure.py   bench, profile, calibrate, simulate
    convert.py   import, export
    process.py   SIGTERM of a resumable command handled as Ctrl-C; standard output named when a write to it fails

``from minispark.cli import app`` is the whole CLI (every command registered). Note that the attribute
``minispark.cli.app`` is that typer app, not the module; the module is ``sys.modules["minispark.cli.app"]``
(``from minispark.cli.app import console`` works as usual).

    minispark --help
"""

from .app import app, order_commands, run

# Importing a family module runs its ``@app.command`` decorators, which register its commands on ``app``;
# nothing else registers them, so every family is imported here, also the ones no name is used from.
from . import decode, data, measure, convert  # noqa: F401  (imported for their registration)

# The families register interleaved with respect to the order the commands have always been listed in
# (``--help``, docs/cli.md), which import order alone cannot reproduce: sort them into it.
order_commands()

__all__ = ["app", "run"]
