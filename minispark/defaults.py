"""The serving defaults the library and the CLI share, kept free of imports so the CLI can show them
in ``--help`` without loading torch. ``serving.build_serving`` is where they are applied.

    python -c "from minispark.defaults import DEFAULT_GAMMA; print(DEFAULT_GAMMA)"
"""

#: γ for drafters that record no block size (the n-gram lookup drafter); a checkpoint's wins.
DEFAULT_GAMMA = 7
#: Confidence threshold of the threshold length policy.
DEFAULT_THRESHOLD = 0.5
