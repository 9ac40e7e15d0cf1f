"""Errors name the library's options: by their own names to a Python caller, by whatever a front end chooses."""

from __future__ import annotations

import pytest

from minispark.core.errors import MinisparkError, OptionError, first_line, option, worded


def test_an_error_names_its_options_by_their_library_names() -> None:
    exc = OptionError(f"{option('draft_vocab')} 0: must be >= 1 (or drop {option('init_from')})", value=0)
    assert str(exc) == "draft_vocab 0: must be >= 1 (or drop init_from)"
    assert exc.options == ("draft_vocab", "init_from") and exc.field == "draft_vocab" and exc.value == 0
    assert exc.worded(lambda name: "--" + name.replace("_", "-")) == "--draft-vocab 0: must be >= 1 (or drop --init-from)"


def test_an_error_quoted_in_another_keeps_its_references() -> None:
    inner = MinisparkError(f"{option('top_p')} must be in (0, 1]")
    outer = MinisparkError(f"{option('drafter')} d: {inner}")
    assert outer.options == ("drafter", "top_p")
    assert worded(outer.template, str.upper) == "DRAFTER d: TOP_P must be in (0, 1]"
    assert first_line(inner) == inner.template  # what a one-line error quotes: still worded by the front end


def test_text_that_only_looks_like_an_option_is_left_alone() -> None:
    """The negative control: names written out (a path, a flag in advice) are not references."""
    exc = MinisparkError("runs/top_p: see --top-p")
    assert exc.options == () and str(exc) == "runs/top_p: see --top-p"
    with pytest.raises(MinisparkError, match="^draft_vocab"):
        raise OptionError(option("draft_vocab"))


def test_a_checked_value_is_refused_as_an_option_error() -> None:
    from minispark.core import checks

    with pytest.raises(OptionError) as refused:
        checks.integer(0, option("max_new_tokens"), 1)
    assert refused.value.field == "max_new_tokens" and str(refused.value) == "max_new_tokens must be >= 1, got 0"
