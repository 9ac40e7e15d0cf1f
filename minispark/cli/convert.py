"""The conversion commands: ``import`` (a DeepSpec checkpoint into minispark's drafter layout) and
``export`` (a minispark drafter in DeepSpec's layout). Each parses its flags and calls
``minispark.model.deepspec_convert``.

    minispark export --help
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from minispark.core import checks, model_files
from minispark.core.errors import MinisparkError

from .app import (DeviceOpt, DtypeOpt, EightBitOpt, FourBitOpt, TargetOpt, _load, _remembered, app, console,
                  err_console, one_line_errors)


@app.command("import")
@one_line_errors
def import_(
    source: Path = typer.Argument(..., help="DeepSpec-layout drafter directory (Qwen3DSparkModel)."),
    out: Path = typer.Option(..., "--out", help="Output minispark drafter directory (new, or one this wrote)."),
    target: Optional[str] = TargetOpt,
    window: Optional[int] = typer.Option(None, "--window", help="Context window W (default: recorded, else 0 = all)."),
    dtype: Optional[str] = DtypeOpt,
    device: Optional[str] = DeviceOpt,
    load_in_4bit: bool = FourBitOpt,
    load_in_8bit: bool = EightBitOpt,
    force: bool = typer.Option(False, "--force", help="Import even a checkpoint whose stored embedding or lm_head "
                               "differ from the target's (one trained for another target), with a warning."),
) -> None:
    """Convert a DeepSpec DSpark/DFlash checkpoint into minispark's drafter layout."""
    from minispark.model.deepspec import deepspec_dir
    from minispark.model.deepspec_convert import import_deepspec

    model_files.checkpoint(source, "SOURCE")
    checks.replaceable_dir(out, "--out", source, by="import")
    checks.integer(window, "--window", 0)
    deepspec_dir(source)  # a minispark drafter given to import: refused before the target loads
    # a directory minispark exported records its target (minispark_target): loaded when --target is not given
    target, dtype, load_in_4bit, load_in_8bit = _remembered(source, target, dtype, device, load_in_4bit, load_in_8bit,
                                                            "SOURCE")
    report = import_deepspec(source, _load(target, dtype, device, load_in_4bit, load_in_8bit), out, window,
                             force=force)
    _print_conversion(report)


@app.command()
@one_line_errors
def export(
    drafter_dir: Path = typer.Argument(..., help="minispark drafter directory (config.json + model.safetensors)."),
    out: Path = typer.Option(..., "--out", help="Output directory (new, or one this wrote)."),
    fmt: str = typer.Option("deepspec", "--format", help="Output layout: deepspec (vLLM / SGLang)."),
    target: Optional[str] = TargetOpt,
    dtype: Optional[str] = DtypeOpt,
    device: Optional[str] = DeviceOpt,
    load_in_4bit: bool = FourBitOpt,
    load_in_8bit: bool = EightBitOpt,
) -> None:
    """Export a minispark drafter in DeepSpec's layout (bf16 safetensors, config.json, serving README)."""
    from minispark.model.deepspec_convert import export_deepspec

    if fmt != "deepspec":
        raise MinisparkError(f"--format {fmt!r}: only 'deepspec' is supported")
    model_files.checkpoint(drafter_dir, "DRAFTER_DIR")
    checks.replaceable_dir(out, "--out", drafter_dir, by="export")
    target, dtype, load_in_4bit, load_in_8bit = _remembered(drafter_dir, target, dtype, device, load_in_4bit,
                                                            load_in_8bit, "DRAFTER_DIR")
    report = export_deepspec(drafter_dir, _load(target, dtype, device, load_in_4bit, load_in_8bit), out)
    _print_conversion(report)


def _print_conversion(report) -> None:
    for warning in report.warnings:
        err_console.print(f"[yellow]warning:[/yellow] {escape(warning)}", highlight=False, soft_wrap=True)
    c = report.config
    console.print(f"wrote {report.out}: {c.num_layers} layers, head {c.head}, confidence head "
                  f"{'on' if c.confidence_head else 'off'}, γ={c.block_size}, window {c.window}", highlight=False,
                  markup=False)
