"""``minispark serve``: the OpenAI-compatible server (``app``), its request checks (``protocol``) and the
decoding thread behind it (``worker``).

    .venv/bin/python -m pytest -q tests/server/test_serve.py
"""
