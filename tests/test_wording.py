"""The CLI words the library's options as the flags the running command declares for them."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from minispark.core.errors import MinisparkError, option
from minispark.wording import flag, for_user, running


def test_a_flag_is_found_in_the_running_commands_declarations() -> None:
    app = typer.Typer()
    seen: list[str] = []

    @app.command()
    def cache(ctx: typer.Context, dtype: str = typer.Option("fp32", "--feature-dtype"), max_new_tokens: int = 4) -> None:
        with running(ctx):
            error = MinisparkError(f"{option('dtype')} {dtype}: x; see {option('max_new_tokens')}")
            seen.append(for_user(error.template))
            seen.append(flag("init_from"))  # not this command's: another command's flag, spelled from the name
        seen.append(for_user(error.template))  # once it has run: each name spelled as a flag

    assert CliRunner().invoke(app, ["--feature-dtype", "int3"]).exit_code == 0
    assert seen == ["--feature-dtype int3: x; see --max-new-tokens", "--init-from", "--dtype int3: x; see --max-new-tokens"]


def test_outside_a_command_options_are_spelled_as_flags() -> None:
    assert for_user(f"{option('heldout_cache')} d: a training cache") == "--heldout-cache d: a training cache"
