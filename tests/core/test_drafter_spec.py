"""The drafter grammar, parsed in one place: every form, its text back, and what it refuses.

    .venv/bin/python -m pytest -q tests/core/test_drafter_spec.py
"""

from __future__ import annotations

from pathlib import Path

import pytest

from minispark.core.drafter_spec import HYBRID, LOOKUP, NONE, TRAINED, DrafterSpec, DrafterSpecError


@pytest.mark.parametrize("text, kind, directory", [
    ("none", NONE, None), ("lookup", LOOKUP, None), ("hybrid", HYBRID, None),
    ("hybrid:runs/d", HYBRID, Path("runs/d")), ("runs/draft/drafter", TRAINED, Path("runs/draft/drafter")),
    ("hybrid:a:b", HYBRID, Path("a:b")),  # only the first colon separates
])
def test_every_form_parses_and_prints_back(text: str, kind: str, directory: Path | None) -> None:
    spec = DrafterSpec.parse(text)
    assert (spec.kind, spec.directory) == (kind, directory)
    assert str(spec) == text and DrafterSpec.parse(spec) is spec and DrafterSpec.parse(str(spec)) == spec
    assert spec.drafts == (kind != NONE)


def test_a_path_object_is_a_trained_drafter() -> None:
    assert DrafterSpec.parse(Path("drafters/x")) == DrafterSpec(TRAINED, Path("drafters/x"))


@pytest.mark.parametrize("text", ["", "   ", "hybrid:", "hybrid: "])
def test_an_empty_name_is_refused_with_the_grammar(text: str) -> None:
    with pytest.raises(DrafterSpecError, match="empty .expected none, lookup, hybrid, hybrid:DIR") as caught:
        DrafterSpec.parse(text)
    assert caught.value.value == text


def test_a_directory_named_like_a_keyword_needs_a_path_prefix() -> None:
    """Negative control: a drafter directory called "lookup" is the lookup unless written ./lookup."""
    assert DrafterSpec.parse("lookup").kind == LOOKUP
    spec = DrafterSpec.parse("./lookup")
    assert spec == DrafterSpec(TRAINED, Path("lookup")) and DrafterSpec.parse(str(spec)) == spec
