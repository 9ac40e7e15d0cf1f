"""The base every layer stands on: errors, target and artifact identity, atomic writes, one writer per output
directory, and the shared defaults and shipped paths.

    python -c "from minispark.core.identity import device_name; print(device_name())"
"""
