"""Which target a ``--target`` names, decided in one place: every embedded spelling, a directory under any
spelling, a hub id, and a path that does not exist (refused, never taken for a hub id).

    .venv/bin/python -m pytest -q tests/target/test_target_ref.py
"""

from __future__ import annotations

from pathlib import Path

import pytest

from minispark.core.errors import MinisparkError
from minispark.target.embedded import EMBEDDED_NAME
from minispark.target.target_ref import DIRECTORY, EMBEDDED, HUB, TargetRef


@pytest.mark.parametrize("source", [None, "", "embedded", EMBEDDED_NAME])
def test_every_embedded_spelling_is_the_embedded_target(source: str | None) -> None:
    ref = TargetRef.parse(source)
    assert (ref.kind, ref.name, ref.directory) == (EMBEDDED, EMBEDDED_NAME, None)


def test_a_directory_is_named_by_its_resolved_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "model").mkdir()
    monkeypatch.chdir(tmp_path)
    for spelling in ("model", "./model", str(tmp_path / "model")):
        ref = TargetRef.parse(spelling)
        assert ref.kind == DIRECTORY and ref.name == str(tmp_path / "model") and ref.local_directory() == Path(spelling)


def test_a_hub_id_has_no_local_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    ref = TargetRef.parse("someone/some-model")
    assert (ref.kind, ref.name, ref.local_directory()) == (HUB, "someone/some-model", None)


@pytest.mark.parametrize("source", ["./missing", "/no/such/model", "a/b/c"])
def test_a_missing_path_is_refused_not_taken_for_a_hub_id(source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control for the hub id above: a path-like name that does not exist is never downloaded."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with pytest.raises(MinisparkError, match="no such directory"):
        TargetRef.parse(source)
