"""The process-wide settings: flags over variables, each variable checked by its rule, and installed only for the
command that built them.

    .venv/bin/python -m pytest -q tests/core/test_settings.py
"""

from __future__ import annotations

import pytest

from minispark.core.defaults import ALLOW_PICKLE_ENV, DRAFT_PRECISION_ENV, IMAGE_MAX_PIXELS, TARGET_RUNTIME_ENV
from minispark.core.errors import MinisparkError
from minispark.core.settings import Settings, settings, use


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (ALLOW_PICKLE_ENV, DRAFT_PRECISION_ENV, TARGET_RUNTIME_ENV, "MINISPARK_MAX_PIXELS",
                 "MINISPARK_THREADS", "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)


def test_the_defaults_without_flags_or_variables() -> None:
    assert Settings.from_environment() == Settings() == Settings("auto", "auto", IMAGE_MAX_PIXELS, False, None)


def test_a_flag_wins_over_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TARGET_RUNTIME_ENV, "eager")
    monkeypatch.setenv(DRAFT_PRECISION_ENV, "float")
    monkeypatch.setenv(ALLOW_PICKLE_ENV, "1")
    from_variables = Settings.from_environment()
    assert (from_variables.runtime, from_variables.draft_precision, from_variables.allow_pickle_weights) == \
        ("eager", "float", True)
    assert Settings.from_environment(runtime="packed", draft_precision="int8").runtime == "packed"


@pytest.mark.parametrize("name, value, says", [(TARGET_RUNTIME_ENV, "turbo", "runtime / $MINISPARK_RUNTIME"),
                                               (DRAFT_PRECISION_ENV, "int4", "draft_precision"),
                                               ("MINISPARK_MAX_PIXELS", "lots", "max_pixels"),
                                               ("OMP_NUM_THREADS", "0", "$OMP_NUM_THREADS")])
def test_a_bad_variable_is_named(monkeypatch: pytest.MonkeyPatch, name: str, value: str, says: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(MinisparkError, match=says.replace("$", r"\$")):
        Settings.from_environment()


def test_installed_settings_hold_for_their_block_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The library reads what the command installed, not the environment; after the block, the environment again
    (negative control: a variable set inside the block is not seen until then)."""
    with use(Settings(runtime="eager", threads=3)):
        monkeypatch.setenv(TARGET_RUNTIME_ENV, "packed")
        assert settings().runtime == "eager" and settings().threads == 3
    assert settings().runtime == "packed" and settings().threads is None
