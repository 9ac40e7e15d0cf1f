"""``python -m minispark.cli ...``: the ``minispark`` console command, run as a module.

    python -m minispark.cli --help
"""

from minispark.cli import run

run()
