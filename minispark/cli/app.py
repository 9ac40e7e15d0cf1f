"""The ``minispark`` command line: parses flags, calls library functions, prints with rich.

Every command is a thin wrapper; what it does is reachable from Python (``minispark.serving.generate``,
``minispark.measuring.bench``, ``minispark.measuring.simulate``, ...). A ``MinisparkError`` is printed as one line.

    minispark --help
"""

from __future__ import annotations

import functools
import json
import math
import os
import shlex
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, get_args

import typer
from rich.markup import escape
from typer.core import TyperCommand, TyperGroup

from minispark import defaults, validate
from minispark.defaults import (DEFAULT_GAMMA, DEFAULT_THRESHOLD, REGEN_MAX_NEW_TOKENS, REGEN_TEMPERATURE, REGEN_TOP_K,
                                REGEN_TOP_P, make_console)
from minispark.target.embedded import EMBEDDED_SPELLINGS
from minispark.errors import MinisparkError


class PlainHelp:
    """Help that shows what to type: no ``<bool>`` after a flag, and a repeatable option as its
    element (``--image <path>``, ``PARTS... <str>``), not ``<list[Path]>``."""

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
    "train": "checkpoints are kept; add --resume to continue from the latest one (from step 0 if none was "
             "written yet)",
    "demo": "finished stages, cache shards and checkpoints are kept; run the same command again to resume",
}


@app.callback()
def main(
    allow_pickle_weights: bool = typer.Option(
        False, "--allow-pickle-weights", help="UNSAFE: also load target weights stored as pickle files (*.bin), "
        "which can run arbitrary code when loaded; only for models you trust (default: safetensors only)."),
    draft_precision: str | None = typer.Option(
        None, "--draft-precision", show_default=False, help="Weights of a served DSpark drafter: auto (int8 on a CPU, where a "
        "proposal is memory-bound; the checkpoint's dtype elsewhere), float, or int8. Lossless either way. "
        "[default: auto]"),
    runtime: str | None = typer.Option(
        None, "--runtime", show_default=False, help="How the target's forward runs: auto (packed for an fp32 CPU "
        "target, eager elsewhere), eager (transformers as it runs, to compare), packed (oneDNN-prepacked "
        "weights, grouped attention, an in-place KV cache; same numbers), or int8 (weight-only int8 text "
        "linears on a CPU: faster steps, a different target). Lossless either way: the baseline and "
        "every drafting mode use the same one. [default: auto]"),
    max_pixels: int | None = typer.Option(
        None, "--max-pixels", show_default=False, help="Pixel budget of one image for a vision-language target: "
        "a larger image is downscaled to it (aspect kept, with a notice). "
        f"[default: {defaults.IMAGE_MAX_PIXELS:,}, ~1 MP, sized for a 6 GB card]"),
) -> None:
    """DSpark speculative decoding for local vision-language models."""
    if allow_pickle_weights:
        os.environ[validate.ALLOW_PICKLE_ENV] = "1"  # read by target loading, here and in any subprocess
    if draft_precision is not None:
        if draft_precision not in defaults.DRAFT_PRECISIONS:
            raise typer.BadParameter(f"{draft_precision!r} is not one of {', '.join(defaults.DRAFT_PRECISIONS)}",
                                     param_hint="--draft-precision")
        os.environ[defaults.DRAFT_PRECISION_ENV] = draft_precision
    if runtime is not None:
        if runtime not in defaults.TARGET_RUNTIMES:
            raise typer.BadParameter(f"{runtime!r} is not one of {', '.join(defaults.TARGET_RUNTIMES)}",
                                     param_hint="--runtime")
        os.environ[defaults.TARGET_RUNTIME_ENV] = runtime
    if max_pixels is not None:
        if max_pixels < defaults.IMAGE_MIN_PIXELS:
            raise typer.BadParameter(f"{max_pixels} is below the smallest budget, {defaults.IMAGE_MIN_PIXELS} "
                                     "(4 visual tokens)", param_hint="--max-pixels")
        os.environ[defaults.IMAGE_MAX_PIXELS_ENV] = str(max_pixels)  # read where images are encoded


def one_line_errors(command: Callable) -> Callable:
    """Turn user-facing errors (and a full disk) into a single ``error: ...`` line and exit status 2;
    Python warnings into one ``notice:`` line each; Ctrl-C into how to resume. A failed command leaves
    no empty ``--out`` directory it created behind."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        from minispark.atomic import NO_SPACE_ERRNOS, NoSpaceError, removed_if_left_empty

        try:
            with removed_if_left_empty(kwargs.get("out")), warnings.catch_warnings():
                warnings.showwarning = _one_line_warning
                return command(*args, **kwargs)
        except PermissionError as exc:  # a file, or a directory on its path (behind a symlink), this user may not use
            _print_error(_permission_denied(exc))
            raise typer.Exit(2) from None
        except OSError as exc:  # a write outside the atomic helpers (a log line) hit the full disk
            if exc.errno not in NO_SPACE_ERRNOS:
                raise
            _print_error(str(NoSpaceError(exc.filename or "a file being written")))
            raise typer.Exit(2) from None
        except MinisparkError as exc:
            _print_error(str(exc))
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            hint = RESUME_HINTS.get(command.__name__)
            if command.__name__ == "demo" and not kwargs.get("train"):
                hint = None  # the plain demo keeps nothing: there is nothing to resume
            out = kwargs.get("out")
            if command.__name__ == "train" and out is not None and not Path(out).exists():
                hint = "nothing was written yet; run the same command again"  # --resume refuses a missing --out
            line = f"interrupted; {hint}: minispark {shlex.join(sys.argv[1:])}" if hint else "interrupted"
            if hint == RESUME_HINTS["train"] and "--resume" not in sys.argv:
                line += " --resume"
            err_console.print(line, highlight=False, soft_wrap=True, markup=False)
            raise typer.Exit(130) from None

    return wrapper


def _permission_denied(exc: PermissionError) -> str:
    name = exc.filename or "a file"
    real = os.path.realpath(name) if exc.filename else name
    via = f" (it leads to {real})" if real != os.path.abspath(name) else ""
    return f"{name}{via}: permission denied; this user may not read or write it, or a directory on its path"


def _print_error(message: str) -> None:
    message = " ".join(message.split())  # one line, whatever the library put in it
    err_console.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)


def _one_line_warning(message: Warning | str, category: type, filename: str, lineno: int, file: Any = None,
                      line: str | None = None) -> None:
    err_console.print(f"notice: {' '.join(str(message).split())}", highlight=False, soft_wrap=True, markup=False)


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
RegenMaxNewOpt = typer.Option(REGEN_MAX_NEW_TOKENS, "--max-new-tokens", help="Tokens per regenerated answer at most.")
RegenTemperatureOpt = typer.Option(REGEN_TEMPERATURE, "--temperature", help="Sampling temperature of the regenerated answers.")
RegenTopPOpt = typer.Option(REGEN_TOP_P, "--top-p", help="Nucleus sampling mass in (0, 1].")
RegenTopKOpt = typer.Option(REGEN_TOP_K, "--top-k", help="Sample from the k most likely tokens; 0 = off.")
JsonOpt = typer.Option(False, "--json", help="Print only one JSON object on stdout (progress and notices on stderr).")
MaxNewTokensHelp = "Tokens to generate at most (capped, with a notice, to what fits the target's context)"
DraftSkipOpt = typer.Option(None, "--draft-skip/--no-draft-skip",
                             help="Leave the drafter out of rounds where drafting is predicted not to pay "
                                  "(default: on in schedule mode).")


def _load(target: Optional[str], dtype: Optional[str], device: Optional[str], load_in_4bit: bool = False,
          load_in_8bit: bool = False):
    from minispark.target.loading import load_target

    from minispark.target.remembered import auto_4bit_notice

    _check_target_flags(target, dtype, device, load_in_4bit, load_in_8bit)
    notice = auto_4bit_notice(target, device, dtype, load_in_4bit, load_in_8bit)  # CUDA only; a flag wins
    if notice is not None:
        err_console.print(f"notice: {notice}", highlight=False, soft_wrap=True, markup=False)
        load_in_4bit = True
    if target in EMBEDDED_SPELLINGS:
        what = "the embedded SmolLM2-135M-Instruct"
    elif validate.target_location(target) is not None:
        what = f"target {target}"
    else:  # say so before the network is touched: a hub id is downloaded unless already cached
        what = f"hub model {target} (downloading from the Hugging Face Hub unless cached)"
    with err_console.status(f"loading {what}..."):
        return load_target(target, dtype=dtype, device=device, load_in_4bit=load_in_4bit, load_in_8bit=load_in_8bit)


def _remembered(artifact: Optional[Any], target: Optional[str], dtype: Optional[str], device: Optional[str],
                load_in_4bit: bool, load_in_8bit: bool) -> tuple[Optional[str], Optional[str], bool, bool]:
    """The target and loading flags with what ``artifact`` (a --drafter DIR) records filled in
    (``target.remembered.resolve_loading``); a contradicting --target is one line, exit 2."""
    from minispark.target.remembered import resolve_loading

    validate.choice(dtype, "--dtype", validate.DTYPES)
    validate.device(device)
    artifact = None if artifact is None or str(artifact) in ("none", "lookup", "hybrid") else str(artifact)
    if artifact is not None and artifact.startswith("hybrid:"):
        artifact = artifact.removeprefix("hybrid:")
    loading = resolve_loading(artifact, target, dtype, device, load_in_4bit, load_in_8bit)
    if loading.notice:
        err_console.print(f"[dim]{escape(loading.notice)}[/dim]", highlight=False, soft_wrap=True)
    return loading.target, loading.dtype, loading.load_in_4bit, loading.load_in_8bit


def _check_target_flags(target: Optional[str], dtype: Optional[str], device: Optional[str],
                        load_in_4bit: bool = False, load_in_8bit: bool = False) -> None:
    """The target flags every loading command shares, checked before anything is loaded."""
    validate.choice(dtype, "--dtype", validate.DTYPES)
    validate.device(device)
    if load_in_4bit and load_in_8bit:
        raise MinisparkError("--load-in-4bit and --load-in-8bit are exclusive")
    if target not in EMBEDDED_SPELLINGS:
        location = validate.target_location(target)
        if location is not None:
            validate.target_weights(location, target)


def _check_regeneration(prompts: Optional[Path], out: Path, temperature: float, seed: int, target: Optional[str],
                        dtype: Optional[str], device: Optional[str], load_in_4bit: bool, load_in_8bit: bool) -> None:
    """The flags cache and answers share, checked before the target loads."""
    _check_prompts(prompts)
    validate.output_dir(out)
    validate.number(temperature, "--temperature", 0.0)
    validate.seed(seed)
    _check_target_flags(target, dtype, device, load_in_4bit, load_in_8bit)


def _check_prompts(prompts: Optional[Path]) -> None:
    """A --prompts file parsed whole (every line, every image) before the target loads: a bad line
    costs milliseconds, not the minutes a large target takes to load."""
    if validate.input_file(prompts, "--prompts") is not None:
        from minispark.data.prompts import load_prompts

        load_prompts(prompts)


def _check_images(images: list[Path]) -> None:
    for path in images:
        validate.image(path)


def _check_serving(prompt: Optional[str], images: list[Path], drafter: Optional[str], mode: Optional[str],
                   gamma: Optional[int], threshold: float, sps: Optional[Path], temperature: float, top_p: float,
                   top_k: int, seed: Optional[int], max_new_tokens: int, stop: Sequence[str] = ()) -> None:
    """The flags generate and chat share."""
    validate.prompt(prompt)
    validate.stop_strings(stop)
    _check_images(images)
    validate.drafter_spec(drafter)
    validate.choice(mode, "--mode", validate.MODES)
    validate.integer(gamma, "--gamma", 1)
    validate.number(threshold, "--threshold", 0.0, 1.0)
    validate.input_file(sps, "--sps")
    validate.sampling(temperature, top_p, top_k)
    validate.seed(seed)
    validate.integer(max_new_tokens, "--max-new-tokens", 1)


@app.command()
@one_line_errors
def generate(
    prompt: Optional[str] = typer.Option(None, "--prompt", help="User message (default: a built-in prompt)."),
    image: list[Path] = typer.Option([], "--image", help="Image file for a vision-language target "
                                     "(repeat --image for more)."),
    target: Optional[str] = TargetOpt,
    drafter: Optional[str] = typer.Option(None, "--drafter", help="none | lookup | hybrid | hybrid:DIR | a drafter "
                                          "directory (default: the drafter shipped for the target, else lookup); "
                                          "hybrid: per round the lookup or the trained drafter."),
    mode: Optional[str] = typer.Option(None, "--mode", help="Length policy: fixed | threshold | schedule (default: "
                                       "schedule with a confidence head and an SPS table, else threshold/fixed)."),
    gamma: Optional[int] = GammaOpt,
    threshold: float = typer.Option(DEFAULT_THRESHOLD, "--threshold", help="Confidence threshold in [0, 1] (threshold mode)."),
    sps: Optional[Path] = typer.Option(None, "--sps", help="SPS table JSON (schedule mode; default: the one for this "
                                       "device, target and dtype)."),
    strict: bool = StrictOpt,
    draft_skip: Optional[bool] = DraftSkipOpt,
    temperature: float = typer.Option(0.0, "--temperature", help="0 = greedy."),
    top_p: float = TopPOpt,
    top_k: int = TopKOpt,
    seed: Optional[int] = typer.Option(None, "--seed", help="Random seed (default: a fresh one, reported)."),
    max_new_tokens: int = typer.Option(256, "--max-new-tokens", help=MaxNewTokensHelp + "; a prompt that "
                                       "alone fills the context is refused)."),
    stop: list[str] = typer.Option([], "--stop", help="Stop string (repeat --stop for more)."),
    dtype: Optional[str] = DtypeOpt,
    device: Optional[str] = DeviceOpt,
    load_in_4bit: bool = FourBitOpt,
    load_in_8bit: bool = EightBitOpt,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of streaming text."),
) -> None:
    """Generate a reply with speculative decoding (lossless: same output as the target alone)."""
    from minispark.serving.generate import DEFAULT_PROMPT, generate as run_generate
    from minispark.target.sampling import SamplingConfig
    from minispark.serving.builder import build_serving

    _check_serving(prompt, image, drafter, mode, gamma, threshold, sps, temperature, top_p, top_k, seed,
                   max_new_tokens, stop)
    sampling = SamplingConfig(temperature, top_k=top_k, top_p=top_p)
    target, dtype, load_in_4bit, load_in_8bit = _remembered(drafter, target, dtype, device, load_in_4bit, load_in_8bit)
    loaded = _load(target, dtype, device, load_in_4bit, load_in_8bit)
    if drafter is not None:
        _check_deepspec(drafter, loaded)
    setup = build_serving(loaded, drafter, mode, gamma, threshold, sps, sampling, strict, draft_skip=draft_skip)
    for hint in setup.hints:  # one line each, verbatim (a path may hold "[")
        err_console.print(f"[dim]{escape(hint)}[/dim]", highlight=False, soft_wrap=True)
    draft, policy = setup.drafter, setup.policy
    on_text = None if as_json else (lambda text: console.print(text, end="", highlight=False, markup=False))
    out = run_generate(loaded, prompt or DEFAULT_PROMPT, images=image, drafter=draft, sampling=sampling,
                       policy=policy, max_new_tokens=max_new_tokens, stop_strings=stop, seed=seed, on_text=on_text,
                       skip=setup.skip)
    if as_json:
        _print_json(out.as_dict(loaded, draft))
        return
    stats = out.result.stats
    console.print()
    err_console.print(f"[dim]{stats.new_tokens} tokens in {stats.wall_s:.2f}s ({stats.tokens_per_s:.1f} tok/s), "
                      f"{stats.rounds} rounds, tau={stats.tau:.2f}, drafter={draft.name}, stop={out.result.stop_reason}"
                      "[/dim]")


@app.command()
@one_line_errors
def chat(
    target: Optional[str] = TargetOpt,
    drafter: Optional[str] = typer.Option(None, "--drafter",
                                          help="none | lookup | hybrid | hybrid:DIR | a DSpark checkpoint directory "
                                               "(default: the shipped drafter for the target, else lookup)."),
    image: list[Path] = typer.Option([], "--image", help="Image file for the first message (repeat --image for "
                                     "more; /image PATH later)."),
    mode: Optional[str] = typer.Option(None, "--mode", help="fixed | threshold | schedule (default: schedule with "
                                                           "an SPS table, else threshold; fixed without confidences)."),
    gamma: Optional[int] = GammaOpt,
    threshold: float = typer.Option(DEFAULT_THRESHOLD, "--threshold", help="Confidence threshold in [0, 1] (threshold mode)."),
    sps: Optional[Path] = typer.Option(None, "--sps", help="SPS table JSON (default: the one for this device)."),
    strict: bool = StrictOpt,
    draft_skip: Optional[bool] = DraftSkipOpt,
    temperature: float = typer.Option(0.0, "--temperature", help="0 = greedy."),
    top_p: float = TopPOpt,
    top_k: int = TopKOpt,
    system: Optional[str] = typer.Option(None, "--system", help="System message."),
    stats: bool = typer.Option(True, "--stats/--no-stats", help="A figures line after each answer."),
    max_new_tokens: int = typer.Option(512, "--max-new-tokens", help="Tokens per answer at most."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Random seed (default: a fresh one)."),
    stop: list[str] = typer.Option([], "--stop", help="Stop string (repeat --stop for more)."),
    dtype: Optional[str] = DtypeOpt,
    device: Optional[str] = DeviceOpt,
    load_in_4bit: bool = FourBitOpt,
    load_in_8bit: bool = EightBitOpt,
) -> None:
    """Chat with the target (and images): streamed answers, KV cache reused across turns, /help inside."""
    from minispark.chat import ChatREPL
    from minispark.serving.conversation import Conversation
    from minispark.target.sampling import SamplingConfig
    from minispark.serving.builder import build_serving

    _check_serving(None, image, drafter, mode, gamma, threshold, sps, temperature, top_p, top_k, seed,
                   max_new_tokens, stop)
    sampling = SamplingConfig(temperature, top_k=top_k, top_p=top_p)
    target, dtype, load_in_4bit, load_in_8bit = _remembered(drafter, target, dtype, device, load_in_4bit, load_in_8bit)
    loaded = _load(target, dtype, device, load_in_4bit, load_in_8bit)
    if image and not loaded.is_vlm:
        raise MinisparkError(f"--image: target {loaded.name} is text-only ({loaded.model_type})")
    setup = build_serving(loaded, drafter, mode, gamma, threshold, sps, sampling, strict, draft_skip=draft_skip)
    with Conversation(loaded, setup.drafter, policy=setup.policy, sampling=sampling, max_new_tokens=max_new_tokens,
                      system=system, stop_strings=stop, seed=seed, skip=setup.skip) as conversation:
        ChatREPL(conversation, setup, console, show_stats=stats).run(images=image)


@app.command()
@one_line_errors
def serve(
    target: Optional[str] = TargetOpt,
    drafter: Optional[str] = typer.Option(None, "--drafter", help="none | lookup | a DSpark checkpoint directory "
                                          "(default: the shipped drafter for the target, else lookup)."),
    mode: Optional[str] = typer.Option(None, "--mode", help="fixed | threshold | schedule (default: schedule with "
                                       "an SPS table; with several requests in flight, schedule = Algorithm 1 "
                                       "across them)."),
    gamma: Optional[int] = GammaOpt,
    sps: Optional[Path] = typer.Option(None, "--sps", help="SPS table JSON (default: the one for this device)."),
    host: str = typer.Option(defaults.SERVE_HOST, "--host", help="Address to bind; anything but loopback is "
                             "reachable from the network (use --api-key)."),
    port: int = typer.Option(defaults.SERVE_PORT, "--port", help="TCP port."),
    api_key: Optional[str] = typer.Option(None, "--api-key", envvar="MINISPARK_API_KEY",
                                          help="Require 'Authorization: Bearer KEY' on /v1 routes."),
    max_concurrent: Optional[int] = typer.Option(None, "--max-concurrent", help="Requests decoded together, "
                                                 "verified in one forward (default: 8 on CUDA, 4 on a CPU)."),
    queue: int = typer.Option(defaults.SERVE_QUEUE, "--queue", help="Requests waiting for a slot before 429."),
    max_tokens: int = typer.Option(defaults.SERVE_MAX_TOKENS, "--max-tokens", help="Largest max_tokens a request may ask."),
    image_dir: Optional[Path] = typer.Option(None, "--image-dir", help="Directory image_url file paths may name "
                                             "(default: none; data: URLs only, never a network fetch)."),
    dtype: Optional[str] = DtypeOpt,
    device: Optional[str] = DeviceOpt,
    load_in_4bit: bool = FourBitOpt,
    load_in_8bit: bool = EightBitOpt,
) -> None:
    """Serve the target as an OpenAI-compatible API (/v1/chat/completions, /v1/models, /health); Ctrl-C drains."""
    from minispark.serve.app import ServeConfig, run_server, served_model_id
    from minispark.serve.protocol import ServeLimits
    from minispark.serving.builder import build_serving

    validate.drafter_spec(drafter)
    validate.choice(mode, "--mode", validate.MODES)
    validate.integer(gamma, "--gamma", 1)
    validate.input_file(sps, "--sps")
    validate.integer(port, "--port", 0)
    validate.integer(max_concurrent, "--max-concurrent", 1)
    validate.integer(queue, "--queue", 0)
    validate.integer(max_tokens, "--max-tokens", 1)
    if image_dir is not None and not image_dir.is_dir():
        raise MinisparkError(f"--image-dir {image_dir}: not a directory")
    loaded = _load(target, dtype, device, load_in_4bit, load_in_8bit)
    setup = build_serving(loaded, drafter, mode, gamma, DEFAULT_THRESHOLD, sps)
    for hint in setup.hints:
        err_console.print(f"notice: {hint}", highlight=False, soft_wrap=True, markup=False)
    slots = max_concurrent or defaults.serve_slots(loaded.device.type)
    limits = ServeLimits(max_tokens=max_tokens, default_max_tokens=min(defaults.SERVE_DEFAULT_MAX_TOKENS, max_tokens),
                         queue=queue)
    config = ServeConfig(served_model_id(loaded), api_key=api_key, limits=limits, image_dir=image_dir, slots=slots)
    if host not in ("127.0.0.1", "localhost", "::1") and not api_key:
        err_console.print(f"notice: --host {host} is reachable from the network and no --api-key is set",
                          highlight=False, markup=False)
    err_console.print(f"serving {config.model_id} ({setup.drafter_spec}, {setup.mode}, {slots} in flight) on "
                      f"http://{host}:{port}/v1 — Ctrl-C drains and exits", highlight=False, markup=False)
    run_server(loaded, setup, config, host, port)


@app.command()
@one_line_errors
def bench(
    target: Optional[str] = TargetOpt,
    drafter: Optional[str] = typer.Option(None, "--drafter", help="Drafter DIR for fixed/threshold/schedule (default: "
                                          "the drafter shipped for the target; none: no drafter); hybrid or "
                                          "hybrid:DIR: that drafter, and the hybrid modes by default."),
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="Prompt JSONL (its last N prompts); default: built-in set."),
    num_prompts: Optional[int] = typer.Option(None, "--num-prompts", help="Prompts used (default: 6 built-in / 16 from a file)."),
    category: Optional[str] = typer.Option(None, "--category", help="Only the --prompts lines of this category (chat, code, ...)."),
    modes: Optional[str] = typer.Option(None, "--modes", help="Comma-separated, from: target,hf,hf-lookup,lookup,fixed,"
                                        "threshold,schedule,schedule-noskip,schedule-raw,hybrid,hybrid-schedule (target always runs). "
                                        "Default: target,hf,hf-lookup,lookup, plus fixed,threshold,schedule with "
                                        "--drafter (and hybrid,hybrid-schedule with --drafter hybrid)."),
    max_new_tokens: int = typer.Option(128, "--max-new-tokens", help="Tokens per answer at most."),
    temperature: float = typer.Option(0.0, "--temperature", help="0 = greedy (parity checked); > 0 = samples."),
    top_p: float = TopPOpt,
    top_k: int = TopKOpt,
    gamma: Optional[int] = GammaOpt,
    threshold: float = typer.Option(DEFAULT_THRESHOLD, "--threshold", help="Confidence threshold in [0, 1] of the threshold mode."),
    sps: Optional[Path] = typer.Option(None, "--sps", help="SPS table for the schedule modes (default: the one for "
                                       "this device, target and dtype)."),
    strict: bool = StrictOpt,
    repeats: int = typer.Option(1, "--repeats", help="Passes over all prompts and modes."),
    seed: int = SeedOpt,
    dtype: Optional[str] = DtypeOpt,
    device: Optional[str] = DeviceOpt,
    load_in_4bit: bool = FourBitOpt,
    load_in_8bit: bool = EightBitOpt,
    as_json: bool = typer.Option(False, "--json", help="Only the JSON report on stdout (progress on stderr)."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Also write tok/s and acceptance per position as a PNG."),
) -> None:
    """Every decoding mode on every prompt, interleaved in one process: speed, τ, time split and parity."""
    from minispark.measuring.bench import (BASELINE_MODES, BenchConfig, build_modes, builtin_prompts, file_prompts,
                                 plot_bench, render_bench, run_bench)
    from minispark.measuring.profiler import rich_progress
    from minispark.target.sampling import SamplingConfig

    validate.drafter_spec(drafter)
    _check_prompts(prompts)
    validate.integer(num_prompts, "--num-prompts", 1)
    for value, flag in ((max_new_tokens, "--max-new-tokens"), (gamma, "--gamma"), (repeats, "--repeats")):
        validate.integer(value, flag, 1)
    if category is not None and prompts is None:
        raise MinisparkError("--category selects lines of --prompts FILE; give the file")
    names = None if modes is None else [m.strip() for m in modes.split(",") if m.strip()]
    if names is not None and not names:
        raise MinisparkError(f"--modes {modes!r}: name at least one mode")
    validate.sampling(temperature, top_p, top_k)
    validate.seed(seed)
    validate.input_file(sps, "--sps")
    validate.output_file(plot, "--plot")
    config = BenchConfig(modes=names or BASELINE_MODES, max_new_tokens=max_new_tokens, gamma=gamma,
                         threshold=threshold, sampling=SamplingConfig(temperature, top_k=top_k, top_p=top_p),
                         repeats=repeats, seed=seed)  # checks the rest before the target loads
    target, dtype, load_in_4bit, load_in_8bit = _remembered(drafter, target, dtype, device, load_in_4bit, load_in_8bit)
    loaded = _load(target, dtype, device, load_in_4bit, load_in_8bit)
    if drafter is None:
        from minispark.serving.generate import default_drafter

        shipped = default_drafter(loaded)
        drafter = None if shipped is None else str(shipped)
        if shipped is not None:
            err_console.print(f"[dim]drafter: {shipped} (shipped for this target; --drafter none to leave it out)[/dim]")
    elif drafter == "none":
        drafter = None
    if names is None and drafter:
        hybrid = ["hybrid", "hybrid-schedule"] if drafter.partition(":")[0] == "hybrid" else []
        config = BenchConfig(**{**config.__dict__, "modes": BASELINE_MODES + ["fixed", "threshold", "schedule"] + hybrid})
    if drafter is not None:
        _check_deepspec(drafter, loaded)
    chosen = (file_prompts(loaded, prompts, num_prompts or 16, category) if prompts
              else builtin_prompts(loaded, num_prompts))
    runnable, notices = build_modes(loaded, config, drafter, sps, strict)
    for notice in notices:
        err_console.print(f"[yellow]{notice}[/yellow]", highlight=False)
    with rich_progress(True, label="bench") as progress:
        report = run_bench(loaded, runnable, chosen, config, progress, drafter=drafter, notices=notices)
    if plot is not None:
        plot_bench(report, plot)
    if as_json:
        _print_json(report)
        return
    console.print(render_bench(report))
    if plot is not None:
        console.print(f"wrote {plot}")


@app.command()
@one_line_errors
def demo(
    train: bool = typer.Option(False, "--train", help="Run the whole pipeline at small scale (cache → train → "
                               "calibrate → profile → bench → chat), reusing finished stages."),
    out: Path = typer.Option(Path("runs/demo"), "--out", help="Pipeline directory (with --train)."),
    target: Optional[str] = TargetOpt,
    drafter: Optional[str] = typer.Option(None, "--drafter", help="none | lookup | a checkpoint DIR (default: the "
                                                                  "shipped drafter, else lookup; not with --train)."),
    num_prompts: int = typer.Option(3, "--num-prompts", help="Held-out chat/code prompts (the file's tail)."),
    max_new_tokens: int = typer.Option(96, "--max-new-tokens", help="Tokens per answer."),
) -> None:
    """Show the speedup: target-only vs the shipped drafter on held-out prompts (--train: build your own)."""
    from minispark.measuring.bench import render_bench
    from minispark.demo import PipelineSizes, render_demo, run_demo, run_pipeline
    from minispark.measuring.profiler import rich_progress

    validate.integer(num_prompts, "--num-prompts", 1)
    validate.integer(max_new_tokens, "--max-new-tokens", 1)
    if not train:
        validate.drafter_spec(drafter)

        def notice(line: str) -> None:
            err_console.print(f"[yellow]{line}[/yellow]", highlight=False, soft_wrap=True)

        loaded = _load(target, None, None)
        with rich_progress(True, label="demo") as progress:
            result = run_demo(loaded, drafter=drafter, num_prompts=num_prompts, max_new_tokens=max_new_tokens,
                              progress=progress, log=notice)
        console.print(render_demo(result))
        return
    if drafter is not None:
        raise MinisparkError("--drafter: not with --train (the pipeline trains its own)")
    validate.output_dir(out)
    _check_target_flags(target, None, None)
    sizes = PipelineSizes(bench_prompts=num_prompts, bench_tokens=max_new_tokens)
    result = run_pipeline(out, sizes, target=target, log=lambda line: err_console.print(line, highlight=False))
    console.print(f"\n[bold]chat[/bold] ▶ {result.chat_prompt}", highlight=False)
    console.print(result.chat_answer, highlight=False, markup=False)
    console.print(render_bench(result.bench))
    console.print(f"continue with: {result.chat_command}", highlight=False, soft_wrap=True)


@app.command()
@one_line_errors
def cache(
    target: Optional[str] = TargetOpt,
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="Prompt JSONL (default: the shipped corpus)."),
    out: Path = typer.Option(Path("runs/cache"), "--out", help="Cache directory (resumes if it exists)."),
    num_samples: Optional[int] = typer.Option(None, "--num-samples", help="Samples to cache (default: one per "
                                              "prompt; more cycles through the prompts with new seeds)."),
    max_new_tokens: int = RegenMaxNewOpt,
    temperature: float = RegenTemperatureOpt,
    top_p: float = RegenTopPOpt,
    top_k: int = RegenTopKOpt,
    layers: str = typer.Option("auto", "--layers", help="auto | comma-separated decoder layer ids (never the last)."),
    anchors_per_sample: int = typer.Option(32, "--anchors-per-sample", help="Anchor positions drawn per answer."),
    anchor_run: int = typer.Option(16, "--anchor-run", help="Anchors drawn as runs of this many consecutive tokens."),
    window: int = typer.Option(32, "--window", help="Context rows stored before each anchor; 0 = full context."),
    block: int = typer.Option(7, "--block", help="Draft block size γ."),
    feature_dtype: str = typer.Option("bf16", "--feature-dtype", help="Stored feature dtype: bf16 | fp16 | fp32."),
    dtype: Optional[str] = DtypeOpt,
    device: Optional[str] = DeviceOpt,
    load_in_4bit: bool = FourBitOpt,
    load_in_8bit: bool = EightBitOpt,
    batch_size: int = typer.Option(0, "--batch-size", help="Answers regenerated together; 0 = auto (64 on a CPU, what "
                                   "fits a quarter of free GPU memory, an existing cache's own when growing it)."),
    samples_per_shard: int = typer.Option(64, "--samples-per-shard", help="Samples per shard file (the unit a "
                                          "resume keeps)."),
    seed: int = SeedOpt,
    split: str = typer.Option("train", "--split", help="train | heldout (an evaluation cache of held-out prompts)."),
    source: str = typer.Option("regenerate", "--source",
                               help="regenerate (the target answers) | text (teacher-force each line's assistant turn)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Estimate disk use and exit."),
    force: bool = typer.Option(False, "--force", help="Start even if the disk check fails."),
    as_json: bool = JsonOpt,
) -> None:
    """Regenerate answers with the target and cache its features for sampled anchor windows only."""
    from dataclasses import replace

    from minispark.data.cache import CacheConfig, build_cache, estimate_cache
    from minispark.data.cache_config import default_prompts
    from minispark.data.regenerate import check_answer_room

    _check_regeneration(prompts, out, temperature, seed, target, dtype, device, load_in_4bit, load_in_8bit)
    try:  # every flag checked before the target loads (the default prompt file depends on it)
        config = CacheConfig(
            prompts=prompts or default_prompts(False, split if split in ("train", "heldout") else "train"), out=out,
            target=target, num_samples=num_samples, max_new_tokens=max_new_tokens, temperature=temperature,
            top_p=top_p, top_k=top_k, layers=layers, anchors_per_sample=anchors_per_sample, anchor_run=anchor_run,
            window=window, block=block, dtype=feature_dtype, target_dtype=dtype, device=device,
            load_in_4bit=load_in_4bit, load_in_8bit=load_in_8bit, batch_size=batch_size,
            samples_per_shard=samples_per_shard, seed=seed, split=split, source=source, force=force)
    except MinisparkError as exc:  # CacheConfig names the stored dtype --dtype in the library
        raise MinisparkError(str(exc).replace("--dtype", "--feature-dtype")) from None
    loaded = _load(target, dtype, device, load_in_4bit, load_in_8bit)
    check_answer_room(loaded, max_new_tokens)
    if prompts is None:
        config = replace(config, prompts=default_prompts(loaded.is_vlm, split))
    if dry_run:
        estimate = estimate_cache(config, target=loaded)
        _print_json(estimate.to_json()) if as_json else console.print(estimate.describe())
        return
    report = build_cache(config, target=loaded, progress=True)
    _print_json(report.to_json()) if as_json else console.print(report.summary())


@app.command()
@one_line_errors
def answers(
    target: Optional[str] = TargetOpt,
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="Prompt JSONL (default: the shipped corpus)."),
    out: Path = typer.Option(Path("runs/answers"), "--out", help="Answer-set directory (resumes and grows if it exists)."),
    num_samples: Optional[int] = typer.Option(None, "--num-samples", help="Answers in the set (default: one per "
                                              "prompt; more cycles through the prompts with new seeds)."),
    max_new_tokens: int = RegenMaxNewOpt,
    temperature: float = RegenTemperatureOpt,
    top_p: float = RegenTopPOpt,
    top_k: int = RegenTopKOpt,
    dtype: Optional[str] = DtypeOpt,
    device: Optional[str] = DeviceOpt,
    load_in_4bit: bool = FourBitOpt,
    load_in_8bit: bool = EightBitOpt,
    batch_size: int = typer.Option(0, "--batch-size", help="Rows sampled together; 0 = auto (64, or the set's own "
                                   "when growing it)."),
    samples_per_shard: int = typer.Option(256, "--samples-per-shard", help="Answers per shard file (the unit a "
                                          "resume keeps)."),
    seed: int = SeedOpt,
    split: str = typer.Option("train", "--split", help="train | heldout (an evaluation set of held-out prompts)."),
    as_json: bool = JsonOpt,
) -> None:
    """Regenerate answers with the target and store them as token ids (no features: training computes them)."""
    from minispark.data.answers import AnswerConfig, build_answers
    from minispark.data.cache_config import default_prompts
    from minispark.data.regenerate import check_answer_room

    _check_regeneration(prompts, out, temperature, seed, target, dtype, device, load_in_4bit, load_in_8bit)
    config = AnswerConfig(prompts=prompts or default_prompts(False, split if split in ("train", "heldout") else "train"),
                          out=out, target=target, num_samples=num_samples, max_new_tokens=max_new_tokens,
                          temperature=temperature, top_p=top_p, top_k=top_k, batch_size=batch_size,
                          samples_per_shard=samples_per_shard, seed=seed, split=split, target_dtype=dtype,
                          device=device, load_in_4bit=load_in_4bit, load_in_8bit=load_in_8bit)
    for value, flag in ((num_samples, "--num-samples"), (max_new_tokens, "--max-new-tokens"),
                        (batch_size, "--batch-size"), (samples_per_shard, "--samples-per-shard")):
        validate.integer(value, flag, 0)  # the upper bound; AnswerConfig checked each minimum
    loaded = _load(target, dtype, device, load_in_4bit, load_in_8bit)
    check_answer_room(loaded, max_new_tokens)
    if prompts is None:
        config.prompts = default_prompts(loaded.is_vlm, split)
    report = build_answers(config, target=loaded)
    _print_json(report.to_json()) if as_json else console.print(report.summary(), highlight=False, markup=False)


@app.command("cache-mix")
@one_line_errors
def cache_mix(
    parts: list[str] = typer.Argument(..., help="Training caches to mix, each DIR or DIR:N (its first N samples)."),
    out: Path = typer.Option(..., "--out", help="Directory of the mixed cache (a rerun resumes it)."),
    samples_per_shard: int = typer.Option(128, "--samples-per-shard", help="Samples per shard file of the mix."),
    as_json: bool = JsonOpt,
) -> None:
    """Mix finished training caches (e.g. regenerated answers and teacher-forced text) into one cache."""
    from minispark.data.cache_mix import mix_caches, parse_part

    validate.output_dir(out)
    validate.integer(samples_per_shard, "--samples-per-shard", 1)
    specs = [parse_part(spec) for spec in parts]
    for spec in specs:
        validate.input_dir(spec.directory, "PARTS")
    manifest = mix_caches(out, specs, samples_per_shard=samples_per_shard, log=err_console.print)
    totals = manifest["totals"]
    if as_json:
        _print_json({"out": str(out), "parts": manifest["config"]["parts"], **totals})
        return
    console.print(f"{out}: {totals['samples']} samples ({totals['generated_tokens']} answer tokens, "
                  f"{totals['anchors']} anchors) from " + ", ".join(
                      f"{p['samples']} of {p['directory']} ({p['source']})" for p in manifest["config"]["parts"]))


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": False})
@one_line_errors
def train(
    ctx: typer.Context,
    recipe: str = typer.Option(..., "--recipe", help="Recipe name (rtx3050, cpu-smollm2, tiny) or a TOML file."),
    cache_dir: Optional[Path] = typer.Option(None, "--cache", help="Target cache directory."),
    answers_dir: Optional[Path] = typer.Option(None, "--answers", help="An answer set (`minispark answers`): the "
                                               "target computes the features as training goes, no cache on disk."),
    out: Optional[Path] = typer.Option(None, "--out", help="Output directory for checkpoints and the drafter."),
    resume: bool = typer.Option(False, "--resume", help="Continue from the latest checkpoint in --out."),
    heldout_cache: Optional[Path] = typer.Option(None, "--heldout-cache",
                                                 help="A --split heldout cache or answer set: evaluate τ on it, "
                                                 "keep the best."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the memory breakdown and predicted peak."),
    no_progress: bool = typer.Option(False, "--no-progress", help="Log lines instead of a progress bar."),
    as_json: bool = JsonOpt,
) -> None:
    """Train the DSpark drafter on a target cache or an answer set. Extra KEY=VALUE arguments override the recipe."""
    from minispark.training.memory import estimate_memory
    from minispark.training.recipes import load_recipe
    from minispark.training.train import train as run_train

    if cache_dir is not None and answers_dir is not None:
        raise MinisparkError("--cache and --answers: train on a feature cache or on an answer set, not both")
    overrides = list(ctx.args)
    if answers_dir is not None:
        validate.input_dir(answers_dir, "--answers")
        from minispark.data.answers import AnswerSet

        AnswerSet(answers_dir, verify=False)  # not an answer set: one line naming its manifest, before --out
        overrides += ["cache_dir=none", f"answers_dir={answers_dir}"]  # --answers replaces the recipe's cache
    config = load_recipe(recipe, overrides)
    validate.input_dir(heldout_cache, "--heldout-cache")
    if heldout_cache is not None:
        config.heldout_cache = str(heldout_cache)
    if dry_run:
        breakdown = estimate_memory(config)
        _print_json(breakdown.to_json()) if as_json else console.print(breakdown.describe())
        return
    validate.input_dir(cache_dir, "--cache")
    validate.output_dir(out)
    if resume:
        validate.input_dir(out, "--out")
    report = run_train(config, cache_dir, out, resume=resume, progress=not no_progress and not as_json,
                       log=lambda line: err_console.print(line, highlight=False, markup=False, soft_wrap=True))
    _print_json(report.to_json()) if as_json else console.print(report.summary())


@app.command()
@one_line_errors
def profile(
    target: Optional[str] = TargetOpt,
    drafter: Optional[Path] = typer.Option(None, "--drafter", help="A drafter directory: profile the target it "
                                           "records (as it was loaded) when --target is not given."),
    dtype: Optional[str] = DtypeOpt,
    device: Optional[str] = DeviceOpt,
    load_in_4bit: bool = FourBitOpt,
    load_in_8bit: bool = EightBitOpt,
    contexts: str = typer.Option(",".join(map(str, defaults.PROFILE_CONTEXTS)), "--contexts",
                                 help="KV-cache lengths to profile."),
    max_tokens: int = typer.Option(defaults.PROFILE_MAX_TOKENS, "--max-tokens", help="Profile 1..N new tokens per step (≥ γ+1)."),
    rounds: int = typer.Option(defaults.PROFILE_ROUNDS, "--rounds", help="Shuffled rounds per context."),
    warmup: int = typer.Option(defaults.PROFILE_WARMUP, "--warmup", help="Untimed passes over every size per context."),
    drift_bound: float = typer.Option(defaults.PROFILE_DRIFT_BOUND, "--drift-bound",
                                      help="Relative reference drift that re-measures a round."),
    max_remeasure: int = typer.Option(defaults.PROFILE_MAX_REMEASURE, "--max-remeasure",
                                      help="Re-measurements of a drifted round at most."),
    cooldown: float = typer.Option(defaults.PROFILE_COOLDOWN_S, "--cooldown",
                                   help="Seconds to rest before re-measuring a drifted round."),
    seed: int = SeedOpt,
    threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads (CPU targets)."),
    note: str = typer.Option("", "--note", help="Free text stored in the table's metadata."),
    allow_busy: bool = typer.Option(False, "--allow-busy", help="Write the table even if the CPU was busy (flagged)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Output directory (default: the user table directory, "
                                       "$MINISPARK_SPS_TABLES or sps_tables/ in the user cache dir; looked up before "
                                       "the shipped tables)."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Also write a PNG of the SPS curves."),
    as_json: bool = JsonOpt,
) -> None:
    """Measure this device's steps-per-second table for the target (throttle-aware, interleaved)."""
    from dataclasses import asdict

    from minispark.measuring.profiler import ProfileConfig, format_table, run_profile

    lengths = validate.floats(contexts, "--contexts", low=0.0)
    if any(c != int(c) for c in lengths):
        raise MinisparkError(f"--contexts: expected whole token counts, got {contexts!r}")
    validate.number(drift_bound, "--drift-bound", 0.0, low_open=True)
    validate.number(cooldown, "--cooldown", 0.0, 3600.0)
    validate.integer(threads, "--threads", 1)
    for value, flag, minimum in ((rounds, "--rounds", 1), (warmup, "--warmup", 0),
                                 (max_remeasure, "--max-remeasure", 0)):
        validate.integer(value, flag, minimum)
    if threads is not None and threads > (os.cpu_count() or 1):
        raise MinisparkError(f"--threads {threads}: this machine has {os.cpu_count()} CPUs (a table keyed to more "
                             "threads than it can run is never matched)")
    if max_tokens < DEFAULT_GAMMA + 1:
        raise MinisparkError(f"--max-tokens {max_tokens}: schedule mode verifies up to γ + 1 = {DEFAULT_GAMMA + 1} "
                             "tokens per round; profile at least that many")
    validate.seed(seed)
    validate.output_dir(out)
    validate.output_file(plot, "--plot")
    config = ProfileConfig(contexts=[int(c) for c in lengths], max_tokens=max_tokens,
                           rounds=rounds, warmup=warmup, drift_bound=drift_bound, max_remeasure=max_remeasure,
                           cooldown_s=cooldown, seed=seed, note=note, allow_busy=allow_busy)
    validate.input_dir(drafter, "--drafter")
    target, dtype, load_in_4bit, load_in_8bit = _remembered(drafter, target, dtype, device, load_in_4bit, load_in_8bit)
    _check_target_flags(target, dtype, device, load_in_4bit, load_in_8bit)
    from minispark.target.remembered import auto_4bit_notice

    notice = auto_4bit_notice(target, device, dtype, load_in_4bit, load_in_8bit)  # CUDA only; a flag wins
    if notice is not None:
        err_console.print(f"notice: {notice}", highlight=False, soft_wrap=True, markup=False)
        load_in_4bit = True
    table, path = run_profile(config, target=target, dtype=dtype, device=device, load_in_4bit=load_in_4bit,
                              load_in_8bit=load_in_8bit, threads=threads, out_dir=out, plot=plot,
                              show_progress=not as_json)
    if as_json:
        _print_json({"path": str(path), **asdict(table)})
        return
    console.print(format_table(table, [n for n in (1, 2, 4, 8, 16) if n <= max_tokens]))
    console.print(f"wrote {path}")


@app.command()
@one_line_errors
def calibrate(
    drafter: Path = typer.Option(..., "--drafter", help="DSpark checkpoint directory (STS is stored there)."),
    prompts: Path = typer.Option(..., "--prompts", help="Held-out prompts JSONL (its last N prompts are used)."),
    num_prompts: int = typer.Option(16, "--num-prompts", help="Prompts rolled out (the file's last N)."),
    target: Optional[str] = TargetOpt,
    gamma: Optional[int] = GammaOpt,
    temperature: float = typer.Option(1.0, "--temperature", help="Serving temperature the rollouts use."),
    top_p: float = TopPOpt,
    top_k: int = TopKOpt,
    max_new_tokens: int = typer.Option(128, "--max-new-tokens", help="Tokens per rollout at most."),
    min_rounds: int = typer.Option(defaults.CALIBRATION_MIN_ROUNDS, "--min-rounds",
                                   help="Refuse to fit (keeping the stored calibration) on fewer rounds at any "
                                        "draft position."),
    seed: int = SeedOpt,
    dtype: Optional[str] = DtypeOpt,
    device: Optional[str] = DeviceOpt,
    load_in_4bit: bool = FourBitOpt,
    load_in_8bit: bool = EightBitOpt,
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write reliability diagrams (PNG)."),
    as_json: bool = JsonOpt,
) -> None:
    """Roll out the loop, report ECE/AUC/Brier per position, fit and store Sequential Temperature Scaling."""
    from dataclasses import asdict

    from minispark.measuring.calibrate import plot_reliability, reliability, render_metrics, render_reliability
    from minispark.measuring.profiler import rich_progress
    from minispark.data.prompts import load_prompt_inputs
    from minispark.measuring.rollouts import calibrate_drafter
    from minispark.target.sampling import SamplingConfig
    from minispark.serving.builder import build_serving

    validate.checkpoint(drafter, "--drafter")
    # cp -rL: the contents, also through a symlink to the shipped directory (cp -r would copy the link)
    validate.not_shipped(drafter, "--drafter", f"copy it (cp -rL {shlex.quote(str(drafter))} my-drafter) and "
                         "calibrate the copy")
    _check_prompts(prompts)
    validate.integer(num_prompts, "--num-prompts", 1)
    validate.integer(gamma, "--gamma", 1)
    validate.integer(max_new_tokens, "--max-new-tokens", 1)
    validate.integer(min_rounds, "--min-rounds", 1)
    validate.seed(seed)
    validate.output_file(plot, "--plot")
    sampling = SamplingConfig(validate.number(temperature, "--temperature", 0.0))
    target, dtype, load_in_4bit, load_in_8bit = _remembered(drafter, target, dtype, device, load_in_4bit, load_in_8bit)
    loaded = _load(target, dtype, device, load_in_4bit, load_in_8bit)
    sampling = SamplingConfig(temperature, top_k=top_k, top_p=top_p)
    setup = build_serving(loaded, drafter, "fixed", gamma, sampling=sampling)  # fixed: every position rolled out
    inputs = load_prompt_inputs(loaded, prompts, num_prompts)
    if not inputs:
        raise MinisparkError(f"--prompts {prompts}: no prompt usable with target {loaded.name}")
    with rich_progress(True, label="calibrate") as progress:
        report = calibrate_drafter(loaded, setup.drafter, drafter, inputs, setup.gamma, sampling, max_new_tokens, seed,
                                   progress=None if progress is None else
                                   (lambda i: progress(i, len(inputs), f"rolled out {i}/{len(inputs)} prompts")),
                                   min_rounds=min_rounds)
    rollouts, calibration = report.pop("rollouts"), report.pop("calibration")
    if plot is not None:
        plot_reliability(plot, rollouts.confidences, rollouts.accepted, calibration)
    if as_json:
        _print_json({**report, "before": [asdict(m) for m in report["before"]],
                     "after": [asdict(m) for m in report["after"]]})
        return
    console.print(render_metrics(report["before"], report["after"]))
    for label, cal in (("raw", None), ("STS", calibration)):
        bins = reliability(rollouts.confidences, rollouts.accepted, 1, cal)
        console.print(render_reliability(bins, title=f"reliability of a_1 ({label})"))
    console.print(f"STS temperatures {', '.join(f'{t:.2f}' for t in report['temperatures'])} → {report['path']}")


@app.command()
@one_line_errors
def simulate(
    conf: Optional[str] = typer.Option(None, "--conf", help="Per-position confidences in [0, 1], e.g. 0.9,0.8,0.7."),
    sps: Optional[Path] = typer.Option(None, "--sps", help="SPS table JSON."),
    sps_inline: Optional[str] = typer.Option(None, "--sps-inline", help="Steps per second for 1,2,3.. tokens, "
                                             "positive and never rising: 1.0,0.5,0.45"),
    appendix_a: bool = typer.Option(False, "--appendix-a", help="Run the peeking-scheduler counterexample "
                                    "(Appendix A) by Monte Carlo."),
    draws: int = typer.Option(100_000, "--draws", help="Monte Carlo draws (--appendix-a)."),
    seed: int = SeedOpt,
    as_json: bool = JsonOpt,
) -> None:
    """The scheduler simulator: Θ(ℓ), causal vs peeking choices, the Appendix A counterexample."""
    from minispark.measuring.simulate import appendix_a as run_appendix_a, render_appendix_a, render_theta_table, theta_table
    from minispark.serving.sps import SPSTable

    validate.seed(seed)
    if appendix_a:
        validate.integer(draws, "--draws", 1)
        result = run_appendix_a(draws=draws, seed=seed)
        _print_json(result) if as_json else console.print(render_appendix_a(result))
        return
    if conf is None:
        raise MinisparkError("--conf is required (or use --appendix-a)")
    confidences = validate.floats(conf, "--conf", low=0.0, high=1.0)
    if sps is not None and sps_inline is not None:
        raise MinisparkError("--sps and --sps-inline are exclusive; give one")
    if sps is not None:
        table = SPSTable.load(validate.input_file(sps, "--sps"))
    elif sps_inline is not None:
        table = SPSTable.from_inline(validate.sps_values(sps_inline))
    else:
        raise MinisparkError("give --sps FILE or --sps-inline 1.0,0.5,...")
    result = theta_table(confidences, table)
    _print_json(result) if as_json else console.print(render_theta_table(result))


def _check_deepspec(drafter: str, target) -> None:
    """A DeepSpec-layout --drafter is checked against the target first, for errors naming the key."""
    from minispark.model.deepspec import check_against_target, is_deepspec_dir

    if str(drafter).startswith("hybrid:"):  # the hybrid's trained drafter
        drafter = str(drafter).partition(":")[2]
    if is_deepspec_dir(drafter):
        check_against_target(drafter, target)


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
) -> None:
    """Convert a DeepSpec DSpark/DFlash checkpoint into minispark's drafter layout."""
    from minispark.model.deepspec_export import import_deepspec

    validate.checkpoint(source, "SOURCE")
    validate.replaceable_dir(out, "--out", source)
    validate.integer(window, "--window", 0)
    report = import_deepspec(source, _load(target, dtype, device, load_in_4bit, load_in_8bit), out, window)
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
    from minispark.model.deepspec_export import export_deepspec

    if fmt != "deepspec":
        raise MinisparkError(f"--format {fmt!r}: only 'deepspec' is supported")
    validate.checkpoint(drafter_dir, "DRAFTER_DIR")
    validate.replaceable_dir(out, "--out", drafter_dir)
    target, dtype, load_in_4bit, load_in_8bit = _remembered(drafter_dir, target, dtype, device, load_in_4bit,
                                                            load_in_8bit)
    report = export_deepspec(drafter_dir, _load(target, dtype, device, load_in_4bit, load_in_8bit), out)
    _print_conversion(report)


def _print_conversion(report) -> None:
    for warning in report.warnings:
        err_console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False, soft_wrap=True)
    c = report.config
    console.print(f"wrote {report.out}: {c.num_layers} layers, head {c.head}, confidence head "
                  f"{'on' if c.confidence_head else 'off'}, γ={c.block_size}, window {c.window}", highlight=False)


def run(argv: list[str] | None = None) -> None:
    """The ``minispark`` console entry point: ``app``, with click's usage errors (an unknown option,
    a value of the wrong type) as one ``error:`` line and exit status 2, like every other bad input."""
    try:  # typer vendors click from 0.25 on
        from typer._click.exceptions import ClickException
    except ImportError:
        from click.exceptions import ClickException

    try:
        code = app(args=argv, prog_name="minispark", standalone_mode=False)
    except ClickException as exc:
        ctx = getattr(exc, "ctx", None)
        command = ctx.command_path if ctx is not None else "minispark"
        message = " ".join(exc.format_message().split())
        err_console.print(f"error: {message} (see `{command} --help`)", highlight=False, soft_wrap=True,
                          markup=False)
        sys.exit(exc.exit_code)
    except typer.Abort:
        err_console.print("aborted", markup=False)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    run()
