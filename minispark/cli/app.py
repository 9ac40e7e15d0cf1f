"""The ``minispark`` command line's shared part: the typer ``app`` and its global options (``--runtime``,
``--max-pixels``, ...), the :class:`PlainHelp` help classes, :func:`one_line_errors`, the consoles, the
option objects several commands share (``TargetOpt``, ``JsonOpt``, ...), the helpers several command
families use (target loading, ``--prompts`` checks, JSON output) and :func:`run`, the console entry point.

The commands themselves live in one module per family (``decode``, ``data``, ``measure``, ``convert``),
each registering on this ``app``; this module imports none of them (``minispark/cli/__init__.py`` does).
Every command is a thin wrapper; what it does is reachable from Python (``minispark.serving.generate``,
``minispark.measuring.bench``, ``minispark.measuring.simulate``, ...). A ``MinisparkError`` is printed as one line.

    minispark --help
"""

from __future__ import annotations

import errno
import functools
import json
import math
import os
import shlex
import signal
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Optional, get_args

import typer
from rich.markup import escape
from typer.core import TyperCommand, TyperGroup
from typer.main import get_command_name

from minispark.core import checks, check_lists, model_files
from minispark.core import defaults
from minispark.core.console import make_console
from minispark.core.defaults import DEFAULT_GAMMA
from minispark.core.settings import Settings, settings, use
from minispark.core.drafter_spec import DrafterSpec
from minispark.target.embedded import EMBEDDED_NAME
from minispark.target.target_ref import DIRECTORY, EMBEDDED, TargetRef, target_weights
from minispark.core.errors import MinisparkError, out_of_memory

from minispark.wording import for_user, running
from .process import STDOUT_NAME, Terminated, sigterm_interrupts, stdout_full, stdout_named


class PlainHelp:
    """Help that shows what to type: no ``<bool>`` after a flag, and a repeatable option as its
    element (``--image <path>``, ``PARTS... <str>``), not ``<list[Path]>``; and every number option (the global
    ones too) read by the project's one rule of numbers in text, ``check_lists.typed_number``."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        typed, _, _ = self.make_parser(ctx).parse_args(args=list(args))
        try:
            for param in self.params:
                kind = param.type_descriptor.annotation  # ``int | None`` reads as int
                if kind in (int, float) and param.name in typed:
                    check_lists.typed_number(str(typed[param.name]), param.opts[0], whole=kind is int)
        except MinisparkError as exc:  # before typer converts it (click's own errors would come after)
            _print_error(exc.template)
            raise typer.Exit(2) from None
        ctx.meta[TYPED_KEY] = typed  # for :func:`_check_typed_paths`: typer's ``Path`` drops a trailing '/'
        return super().parse_args(ctx, args)

    def invoke(self, ctx: Any) -> Any:
        with running(ctx):  # the library's option names are worded as this command's flags
            return super().invoke(ctx)

    def get_params(self, ctx: Any) -> list:
        params = super().get_params(ctx)
        for param in params:
            if getattr(param, "is_flag", False):
                param.metavar = ""
            elif getattr(param, "multiple", False):
                param.metavar = f"<{get_args(param.type_descriptor.annotation)[0].__name__.lower()}>"
            elif getattr(param, "nargs", 1) == -1:  # a variadic argument (PARTS...): its element type
                label = f"<{get_args(param.type_descriptor.annotation)[0].__name__.lower()}>"
                param.display_type_rich = lambda ctx, label=label: label
        return params


class PlainHelpGroup(PlainHelp, TyperGroup):
    pass


class PlainHelpCommand(PlainHelp, TyperCommand):
    pass


class PlainHelpTyper(typer.Typer):
    """A ``typer.Typer`` whose commands render :class:`PlainHelp`."""

    def command(self, *args: Any, **kwargs: Any) -> Callable:
        return super().command(*args, cls=PlainHelpCommand, **kwargs)


app = PlainHelpTyper(cls=PlainHelpGroup, add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="DSpark speculative decoding for local vision-language models.")
# Piped or redirected output (a log file, `| less`) gets a width that fits the bench table instead of
# rich's 80-column fallback, which truncates every cell; $COLUMNS still wins.
console = make_console()
err_console = make_console(stderr=True)

#: What to run after Ctrl-C to carry on where a command stopped.
RESUME_HINTS = {
    "cache": "finished shards are kept; run the same command again to resume",
    "answers": "finished shards are kept; run the same command again to resume",
    "cache_mix": "finished shards are kept; run the same command again to resume",
    "train": "checkpoints are kept; add --resume to continue from the latest one (from step 0 if none was "
             "written yet)",
    "demo": "finished stages, cache shards and checkpoints are kept; run the same command again to resume",
}


#: Where :class:`PlainHelpCommand` keeps the strings as typed (option name -> value or values) in click's context.
TYPED_KEY = "minispark.typed"
#: Path options that name a file, not a directory: one typed with a trailing '/' is refused as typed.
FILE_FLAGS = frozenset({"--plot", "--prompts", "--sps", "--image", "--recipe"})
#: String options and arguments that are paths, checked like the ``Path`` ones.
PATH_TEXTS = frozenset({"--target", "--drafter", "--recipe", "PARTS"})
#: Path options where an empty string is a value of its own: --target '' is the embedded target, and
#: --drafter '' has its own refusal (``model_files.drafter_spec``, which ``open_drafter`` runs).
EMPTY_MEANS = frozenset({"--target", "--drafter"})


@app.callback()
def main(
    allow_pickle_weights: bool = typer.Option(
        False, "--allow-pickle-weights", help="UNSAFE: also load target weights stored as pickle files (*.bin), "
        "which can run arbitrary code when loaded; only for models you trust (default: safetensors only)."),
    draft_precision: str | None = typer.Option(
        None, "--draft-precision", show_default=False, help="Weights of a served DSpark drafter: auto (int8 on a CPU, where a "
        "proposal is memory-bound; the checkpoint's dtype elsewhere), float, or int8. Lossless either way. "
        "(default: auto)"),
    runtime: str | None = typer.Option(
        None, "--runtime", show_default=False, help="How the target's forward runs: auto (blocks for an fp32 CPU "
        "target converted from a GGUF, packed for another fp32 or bf16 CPU target, eager elsewhere), eager "
        "(transformers as it runs, to compare), packed (oneDNN-prepacked weights, grouped attention, an in-place KV "
        "cache; same numbers), blocks (packed, and steps that read the GGUF's 4-/8-bit blocks the fp32 weights "
        "were dequantized from: same numbers, a fifth of the bytes; needs AVX-512 and a C compiler), or int8 (weight-only int8 text "
        "linears on a CPU: faster steps; a different target, which drafting matches only up to near-ties), "
        "or compiled (a static KV cache and torch.compiled steps, CUDA graphs on a GPU; compiles once, "
        "then cached on disk). The baseline and every drafting mode use the same one. (default: auto)"),
    max_pixels: int | None = typer.Option(
        None, "--max-pixels", show_default=False, help="Pixel budget of one image for a vision-language target: "
        "a larger image is downscaled to it (aspect kept, with a notice). "
        f"(default: {defaults.IMAGE_MAX_PIXELS:,}, ~1 MP, sized for a 6 GB card)"),
    threads: int | None = typer.Option(
        None, "--threads", show_default=False, help="CPU threads torch runs a CPU target with, fixed. (default: "
        "$OMP_NUM_THREADS if set, else the cores other processes leave free, re-read as decoding goes: "
        "OpenMP's threads stall beside a busy process)"),
) -> None:
    """DSpark speculative decoding for local vision-language models."""
    if draft_precision is not None and draft_precision not in defaults.DRAFT_PRECISIONS:
        raise typer.BadParameter(f"{draft_precision!r} is not one of {', '.join(defaults.DRAFT_PRECISIONS)}",
                                 param_hint="--draft-precision")
    if runtime is not None and runtime not in defaults.TARGET_RUNTIMES:
        raise typer.BadParameter(f"{runtime!r} is not one of {', '.join(defaults.TARGET_RUNTIMES)}",
                                 param_hint="--runtime")
    if max_pixels is not None:
        if max_pixels < defaults.IMAGE_MIN_PIXELS:
            raise typer.BadParameter(f"{max_pixels} is below the smallest budget, {defaults.IMAGE_MIN_PIXELS} "
                                     "(4 visual tokens)", param_hint="--max-pixels")
        if max_pixels > checks.MAX_INT:  # past a C int the image processors' arithmetic overflows
            raise typer.BadParameter(f"{max_pixels} is above the largest budget, {checks.MAX_INT}",
                                     param_hint="--max-pixels")
    if threads is not None:
        if not 1 <= threads <= checks.MAX_INT:
            raise typer.BadParameter(f"{threads} is not a thread count (a whole number >= 1)", param_hint="--threads")
        os.environ["OMP_NUM_THREADS"] = str(threads)  # before torch is imported: OpenMP sizes its pool from it
    # the command builds the settings from these and the variables (its errors are one line) and installs them
    ctx = _current_context()
    if ctx is not None:
        ctx.obj = {"runtime": runtime, "draft_precision": draft_precision, "max_pixels": max_pixels,
                   "allow_pickle_weights": allow_pickle_weights, "threads": threads}


def _current_context() -> Any:
    try:  # typer vendors click from 0.25 on
        from typer._click.globals import get_current_context
    except ImportError:
        from click import get_current_context
    return get_current_context(silent=True)


def _settings() -> Settings:
    """The settings of this command: the global flags given, the rest from their variables."""
    ctx = _current_context()
    given = ctx.find_root().obj if ctx is not None and isinstance(ctx.find_root().obj, dict) else {}
    return Settings.from_environment(**given)


def one_line_errors(command: Callable) -> Callable:
    """Turn user-facing errors (and a full disk) into a single ``error: ...`` line and exit status 2;
    Python warnings into one ``notice:`` line each; Ctrl-C (and SIGTERM of a command in :data:`RESUME_HINTS`)
    into how to resume. A failed command leaves no empty ``--out`` directory it created behind."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        from minispark.core.atomic import NO_SPACE_ERRNOS, FileTooLargeError, NoSpaceError, removed_if_left_empty

        try:
            _check_typed_paths(kwargs)
            with use(_settings()), removed_if_left_empty(kwargs.get("out")), warnings.catch_warnings(), \
                    stdout_named(), sigterm_interrupts(command.__name__ in RESUME_HINTS):
                warnings.showwarning = _one_line_warning
                return command(*args, **kwargs)
        except PermissionError as exc:  # a file, or a directory on its path (behind a symlink), this user may not use
            _print_error(_permission_denied(exc))
            raise typer.Exit(2) from None
        except OSError as exc:  # a write outside the atomic helpers (a log line) hit the full disk or ulimit -f
            if exc.errno == errno.ENAMETOOLONG:  # a name inside a file (a prompt's image): the flags are checked first
                _print_error(f"{str(exc.filename)[:60]!r}...: name too long for this file system")
                raise typer.Exit(2) from None
            if exc.errno == errno.EROFS:
                _print_error(f"{exc.filename or 'a file being written'}: read-only file system; write it elsewhere")
                raise typer.Exit(2) from None
            if exc.errno not in (*NO_SPACE_ERRNOS, errno.EFBIG):
                raise
            if exc.filename == STDOUT_NAME:
                _print_error(_with_resume(stdout_full(exc.errno in NO_SPACE_ERRNOS), command, kwargs))
                raise typer.Exit(2) from None
            failed = NoSpaceError if exc.errno in NO_SPACE_ERRNOS else FileTooLargeError
            _print_error(_with_resume(str(failed(exc.filename or "a file being written")), command, kwargs))
            raise typer.Exit(2) from None
        except MinisparkError as exc:
            full = isinstance(exc, (NoSpaceError, FileTooLargeError))
            _print_error(_with_resume(str(exc), command, kwargs) if full else exc.template)
            raise typer.Exit(2) from None
        except (MemoryError, RuntimeError) as exc:  # sizes past this machine's memory (a recipe's, a batch's)
            message = out_of_memory(exc)
            if message is None:
                raise
            _print_error(message)
            raise typer.Exit(2) from None
        except KeyboardInterrupt as exc:
            terminated = isinstance(exc, Terminated)
            hint = RESUME_HINTS.get(command.__name__)
            if command.__name__ == "demo" and not kwargs.get("train"):
                hint = None  # the plain demo keeps nothing: there is nothing to resume
            out = kwargs.get("out")
            if command.__name__ == "train" and out is not None and not Path(out).exists():
                hint = "nothing was written yet; run the same command again"  # --resume refuses a missing --out
            word = "terminated" if terminated else "interrupted"
            line = f"{word}; {hint}: minispark {shlex.join(sys.argv[1:])}" if hint else word
            if hint == RESUME_HINTS["train"] and "--resume" not in sys.argv:
                line += " --resume"
            err_console.print(line, highlight=False, soft_wrap=True, markup=False)
            raise typer.Exit(128 + (signal.SIGTERM if terminated else signal.SIGINT)) from None

    return wrapper


def _with_resume(message: str, command: Callable, kwargs: dict[str, Any]) -> str:
    """A full disk's "run the command again", for a train run that has a checkpoint: the same command without
    --resume is refused there ("already holds a training run")."""
    out = kwargs.get("out")
    if command.__name__ != "train" or kwargs.get("resume") or out is None:
        return message
    from minispark.training.trainer import LATEST_FILE

    return f"{message} with --resume (its checkpoints are kept)" if (Path(out) / LATEST_FILE).exists() else message


def _check_typed_paths(kwargs: dict[str, Any]) -> None:
    """Every path option and argument as typed (``checks.typed_path``): one place for every command, before
    anything else is checked or loaded."""
    ctx = _current_context()
    typed = ctx.meta.get(TYPED_KEY, {}) if ctx is not None else {}
    for param in ctx.command.params if typed else ():
        flag = param.opts[0] if param.param_type_name == "option" else param.name.upper()
        value = kwargs.get(param.name)
        values = value if isinstance(value, (list, tuple)) else [value]
        if param.name not in typed or not (flag in PATH_TEXTS or any(isinstance(v, Path) for v in values)):
            continue
        texts = typed[param.name]
        for text in texts if isinstance(texts, (list, tuple)) else [texts]:
            if text == "" and flag in EMPTY_MEANS:
                continue
            checks.typed_path(str(text), flag, names_file=flag in FILE_FLAGS)


def typed_on_command_line(name: str) -> bool:
    """Whether the option ``name`` (its parameter name, ``out``) was typed, not left at its default."""
    ctx = _current_context()
    return ctx is not None and name in ctx.meta.get(TYPED_KEY, {})


def _permission_denied(exc: PermissionError) -> str:
    name = exc.filename or "a file"
    real = os.path.realpath(name) if exc.filename else name
    via = f" (it leads to {real})" if real != os.path.abspath(name) else ""
    if exc.filename and checks.read_only_file_system(real):  # no user may write there: permissions are not why
        return f"{name}{via}: read-only file system; write it elsewhere"
    return f"{name}{via}: permission denied; this user may not read or write it, or a directory on its path"


def _print_error(message: str) -> None:
    message = " ".join(for_user(message).split())  # one line, whatever the library put in it
    err_console.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)


def _one_line_warning(message: Warning | str, category: type, filename: str, lineno: int, file: Any = None,
                      line: str | None = None) -> None:
    err_console.print(f"notice: {' '.join(for_user(str(message)).split())}", highlight=False, soft_wrap=True,
                      markup=False)


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float (NaN, ±inf) as None, so the output is strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:  # numpy / torch scalars
        return json_safe(value.item())
    return value


def _print_json(data: dict) -> None:
    sys.stdout.write(json.dumps(json_safe(data), indent=2, allow_nan=False, default=str) + "\n")


TargetOpt = typer.Option(None, "--target", help="Hub id, local directory, or omit for the embedded SmolLM2.")
#: The sampling temperature of the decoding commands (greedy by default, as ``SamplingConfig``).
TemperatureOpt = typer.Option(defaults.DEFAULT_TEMPERATURE, "--temperature",
                              help=f"In [0, {defaults.MAX_TEMPERATURE:g}]; 0 = greedy.")
#: The drafter of the decoding commands (generate, chat, serve); a drafter directory also names the target.
DrafterOpt = typer.Option(None, "--drafter", help="none | lookup | hybrid | hybrid:DIR | a drafter directory "
                          "(default: the drafter shipped for the target, else lookup); hybrid: per round the "
                          "lookup or the trained drafter. A directory's recorded target is loaded as it was.")
DtypeOpt = typer.Option(None, "--dtype", help="fp32 | bf16 | fp16 (default: bf16 on CUDA, fp32 on CPU).")
DeviceOpt = typer.Option(None, "--device", help="cpu | cuda | cuda:N (default: CUDA if present).")
GammaOpt = typer.Option(None, "--gamma", help=f"Maximum draft tokens per round (default: the drafter's block size, "
                        f"else {DEFAULT_GAMMA}); more than the block size is an error.")
StrictOpt = typer.Option(False, "--strict", help="Refuse an --sps table profiled for another device, target or dtype "
                         "(default: warn).")
FourBitOpt = typer.Option(False, "--load-in-4bit", help="Load the target 4-bit quantized (bitsandbytes, CUDA).")
EightBitOpt = typer.Option(False, "--load-in-8bit", help="Load the target 8-bit quantized (bitsandbytes, CUDA).")
SeedOpt = typer.Option(0, "--seed", help="Random seed.")
TopPOpt = typer.Option(1.0, "--top-p", help="Nucleus sampling mass in (0, 1]; 1 = off.")
TopKOpt = typer.Option(0, "--top-k", help="Sample from the k most likely tokens; 0 = off.")
JsonOpt = typer.Option(False, "--json", help="Print only one JSON object on stdout (progress and notices on stderr).")


def _load(target: Optional[str], dtype: Optional[str], device: Optional[str], load_in_4bit: bool = False,
          load_in_8bit: bool = False):
    from minispark.target.loading import load_target

    _check_target_flags(target, dtype, device, load_in_4bit, load_in_8bit)
    load_in_4bit = _auto_4bit(target, dtype, device, load_in_4bit, load_in_8bit)
    kind = TargetRef.parse(target).kind
    if kind == EMBEDDED:
        what = f"the embedded {EMBEDDED_NAME}"
    elif kind == DIRECTORY:
        what = f"target {target}"
    else:  # say so before the network is touched: a hub id is downloaded unless already cached
        what = f"hub model {target} (downloading from the Hugging Face Hub unless cached)"
    with err_console.status(f"loading {escape(what)}..."):
        return load_target(target, dtype=dtype, device=device, load_in_4bit=load_in_4bit, load_in_8bit=load_in_8bit)


def _auto_4bit(target: Optional[str], dtype: Optional[str], device: Optional[str], load_in_4bit: bool,
               load_in_8bit: bool) -> bool:
    """``load_in_4bit``, or True with a notice where ``target.remembered.auto_4bit_notice`` picks 4-bit."""
    from minispark.target.remembered import auto_4bit_notice

    notice = auto_4bit_notice(target, device, dtype, load_in_4bit, load_in_8bit)  # CUDA only; a flag wins
    if notice is not None:
        err_console.print(f"notice: {notice}", highlight=False, soft_wrap=True, markup=False)
        return True
    return load_in_4bit


def _remembered(artifact: Optional[Any], target: Optional[str], dtype: Optional[str], device: Optional[str],
                load_in_4bit: bool, load_in_8bit: bool,
                flag: str = "--drafter") -> tuple[Optional[str], Optional[str], bool, bool]:
    """The target and loading flags with what ``artifact`` (a --drafter, opened or named, or the argument ``flag``
    names) records filled in (``target.remembered.resolve_loading``); a contradicting --target is one line, exit 2."""
    from minispark.model.drafter_dir import OpenDrafter
    from minispark.target.remembered import loading_from, resolve_loading

    checks.choice(dtype, "--dtype", checks.DTYPES)
    checks.device(device)
    if isinstance(artifact, OpenDrafter):  # its record is read already
        loading = loading_from(artifact.record, artifact.directory, target, dtype, device, load_in_4bit,
                               load_in_8bit, flag)
    else:
        if artifact is not None:  # a drafter names its directory in any form (DIR, hybrid:DIR); a run directory as is
            artifact = DrafterSpec.parse(artifact).directory
        loading = resolve_loading(artifact, target, dtype, device, load_in_4bit, load_in_8bit, flag)
    if loading.notice:
        err_console.print(f"[dim]{escape(loading.notice)}[/dim]", highlight=False, soft_wrap=True)
    return loading.target, loading.dtype, loading.load_in_4bit, loading.load_in_8bit


def _check_target_flags(target: Optional[str], dtype: Optional[str], device: Optional[str],
                        load_in_4bit: bool = False, load_in_8bit: bool = False) -> None:
    """The target flags every loading command shares, checked before anything is loaded (with
    $MINISPARK_MAX_PIXELS, $MINISPARK_DRAFT_PRECISION, $MINISPARK_CACHE and $MINISPARK_SPS_TABLES, which are only
    read later: a bad value is one line on any target, before anything loads)."""
    checks.choice(dtype, "--dtype", checks.DTYPES)
    checks.device(device)
    settings()  # built from the variables: a bad one is one line before anything loads
    defaults.env_dir(defaults.USER_DIR_ENV)  # where the embedded target is converted to
    defaults.env_dir(defaults.SPS_TABLES_ENV)  # where tables are looked up (a file there hides them all)
    if load_in_4bit and load_in_8bit:
        raise MinisparkError("--load-in-4bit and --load-in-8bit are exclusive")
    ref = TargetRef.parse(target)
    if ref.kind == DIRECTORY:
        target_weights(ref.directory, target)


def checked_drafter(spec: Optional[str], drafting: Optional[dict[str, Any]] = None) -> Optional[Any]:
    """The ``--drafter`` of a command that serves a drafter (not ``calibrate``, which replaces its calibration),
    opened once (``model.drafter_dir.open_drafter``: the spec parsed, the directory checked, its config, every
    calibration and its target record read) before the target loads; None when not given."""
    if spec is None:
        return None
    from minispark.model.drafter_dir import open_drafter  # torch: imported only for a drafter given

    return open_drafter(spec, drafting)


def checked_sps(path: Optional[Path], flag: str = "--sps") -> Optional[Path]:
    """``serving.sps.checked_table_file`` for a given --sps file, imported only then: the SPS module brings
    torch (seconds), which a bad flag's one-line error must not wait for."""
    if path is None:
        return None
    from minispark.serving.sps import checked_table_file

    return checked_table_file(path, flag)


def _check_prompts(prompts: Optional[Path]) -> list[Any]:
    """A --prompts file parsed whole (every line, every image) before the target loads: a bad line
    costs milliseconds, not the minutes a large target takes to load. Its samples (none without a file)."""
    if checks.input_file(prompts, "--prompts") is None:
        return []
    from minispark.data.prompts import load_prompts

    return load_prompts(prompts)


#: The order ``--help`` and docs/cli.md list the commands in. The families register
#: interleaved (generate, chat, serve; bench; demo; ...), so no import order of their modules gives it:
#: :func:`order_commands` sorts ``app``'s commands into it once every family has registered.
COMMAND_ORDER = ("generate", "chat", "serve", "bench", "demo", "cache", "answers", "cache-mix", "train", "profile",
                 "calibrate", "simulate", "import", "export")


def order_commands() -> None:
    """Sort ``app``'s registered commands into :data:`COMMAND_ORDER`; one not listed there goes last, in
    registration order."""
    def rank(info: Any) -> int:
        name = info.name or get_command_name(info.callback.__name__)
        return COMMAND_ORDER.index(name) if name in COMMAND_ORDER else len(COMMAND_ORDER)

    app.registered_commands.sort(key=rank)


def run(argv: list[str] | None = None) -> None:
    """The ``minispark`` console entry point: ``app``, with click's usage errors (an unknown option,
    a value of the wrong type) as one ``error:`` line and exit status 2, like every other bad input."""
    try:  # typer vendors click from 0.25 on
        from typer._click.exceptions import ClickException
    except ImportError:
        from click.exceptions import ClickException

    # A closed stdout or stderr (`>&-`) is None: what a command would write there is discarded, as a shell does
    # for output to a closed descriptor, and the files a command writes are written.
    sys.stdout = sys.stdout or open(os.devnull, "w")
    sys.stderr = sys.stderr or open(os.devnull, "w")
    for stream in (sys.stdout, sys.stderr):  # a file name that is not UTF-8 is printed as its own bytes, as ls does
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="surrogateescape")
    try:
        code = app(args=argv, prog_name="minispark", standalone_mode=False)
    except ClickException as exc:
        ctx = getattr(exc, "ctx", None)
        command = ctx.command_path if ctx is not None else "minispark"
        # A bare ``minispark`` (no_args_is_help): rich has printed the help already and the message is empty.
        message = " ".join(exc.format_message().split()) or "no command given"
        err_console.print(f"error: {message} (see `{command} --help`)", highlight=False, soft_wrap=True,
                          markup=False)
        sys.exit(exc.exit_code)
    except typer.Abort:
        err_console.print("aborted", markup=False)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
