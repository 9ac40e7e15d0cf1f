"""The decoding commands: ``generate`` (one reply), ``chat`` (the REPL), ``serve`` (the OpenAI-compatible
API) and ``demo`` (the speedup, or the whole pipeline with ``--train``), with the flag checks they share.
Each parses its flags and calls ``minispark.serving`` / ``minispark.server`` / ``minispark.demo``.

    minispark generate --help
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional, Sequence

import typer
from rich.markup import escape

from minispark.core import checks, model_files
from minispark.core import defaults
from minispark.server import limits
from minispark.core.defaults import DEFAULT_THRESHOLD
from minispark.core.errors import MinisparkError

from .app import (DeviceOpt, DrafterOpt, DtypeOpt, EightBitOpt, FourBitOpt, GammaOpt, StrictOpt, TargetOpt,
                  TemperatureOpt, TopKOpt, TopPOpt, _check_target_flags, _load, _print_json,
                  _remembered, app, checked_drafter, checked_sps, console, err_console, one_line_errors,
                  typed_on_command_line)


MaxNewTokensHelp = "Tokens to generate at most (capped, with a notice, to what fits the target's context)"
DraftSkipOpt = typer.Option(None, "--draft-skip/--no-draft-skip",
                             help="Leave the drafter out of rounds where drafting is predicted not to pay "
                                  "(default: on in schedule mode).")


ThresholdOpt = typer.Option(None, "--threshold", help=f"Confidence threshold in [0, 1] of the threshold mode (default: "
                            f"{DEFAULT_THRESHOLD:g}); refused with another mode, which would ignore it.")


def _check_images(images: list[Path]) -> None:
    for path in images:
        model_files.image(path)


def _check_serving(prompt: Optional[str], images: list[Path], drafter: Optional[str], mode: Optional[str],
                   gamma: Optional[int], threshold: Optional[float], sps: Optional[Path], temperature: float, top_p: float,
                   top_k: int, seed: Optional[int], max_new_tokens: int, stop: Sequence[str] = (),
                   draft_skip: Optional[bool] = None, strict: bool = False) -> Any:
    """The flags generate and chat share; returns the drafter, opened (None when not given)."""
    checks.prompt(prompt)
    checks.stop_strings(stop)
    _check_images(images)
    skip_flag = "--draft-skip" if draft_skip else "--no-draft-skip"  # either is ignored by a drafter that drafts nothing
    opened = checked_drafter(drafter, drafting={"--mode": mode, "--gamma": gamma, "--threshold": threshold,
                                                "--sps": sps, skip_flag: draft_skip, "--strict": strict or None})
    checks.choice(mode, "--mode", checks.MODES)
    checks.integer(gamma, "--gamma", 1)
    if threshold is not None:
        checks.number(threshold, "--threshold", 0.0, 1.0)
    checks.threshold_mode(threshold, mode)
    checks.schedule_mode(sps, strict, mode)
    checked_sps(sps)
    checks.sampling(temperature, top_p, top_k)
    checks.seed(seed)
    checks.integer(max_new_tokens, "--max-new-tokens", 1)
    return opened


def _decoding_target(drafter: Any, target: Optional[str], dtype: Optional[str], device: Optional[str],
                     load_in_4bit: bool, load_in_8bit: bool) -> Any:
    """The target generate, chat and serve decode with: what ``--drafter DIR`` records (the target and
    how it was loaded) fills in the flags not given, then it loads."""
    target, dtype, load_in_4bit, load_in_8bit = _remembered(drafter, target, dtype, device, load_in_4bit, load_in_8bit)
    return _load(target, dtype, device, load_in_4bit, load_in_8bit)


@app.command()
@one_line_errors
def generate(
    prompt: Optional[str] = typer.Option(None, "--prompt", help="User message (default: a built-in prompt)."),
    image: list[Path] = typer.Option([], "--image", help="Image file for a vision-language target "
                                     "(repeat --image for more)."),
    target: Optional[str] = TargetOpt,
    drafter: Optional[str] = DrafterOpt,
    mode: Optional[str] = typer.Option(None, "--mode", help="Round shape: fixed | threshold | schedule | tree "
                                       "(default: tree with a trained drafter; else schedule with a confidence "
                                       "head and an SPS table, else threshold/fixed)."),
    gamma: Optional[int] = GammaOpt,
    threshold: Optional[float] = ThresholdOpt,
    sps: Optional[Path] = typer.Option(None, "--sps", help="SPS table JSON (schedule and tree modes; default: the one "
                                       "for this device, target and dtype)."),
    strict: bool = StrictOpt,
    draft_skip: Optional[bool] = DraftSkipOpt,
    temperature: float = TemperatureOpt,
    top_p: float = TopPOpt,
    top_k: int = TopKOpt,
    seed: Optional[int] = typer.Option(None, "--seed", help="Random seed (default: a fresh one, reported)."),
    max_new_tokens: int = typer.Option(256, "--max-new-tokens", help=MaxNewTokensHelp + "; a prompt that "
                                       "alone fills the context is refused."),
    stop: list[str] = typer.Option([], "--stop", help="Stop string (repeat --stop for more)."),
    dtype: Optional[str] = DtypeOpt,
    device: Optional[str] = DeviceOpt,
    load_in_4bit: bool = FourBitOpt,
    load_in_8bit: bool = EightBitOpt,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of streaming text."),
) -> None:
    """Generate a reply with speculative decoding (lossless: same output as the target alone)."""
    drafter = _check_serving(prompt, image, drafter, mode, gamma, threshold, sps, temperature, top_p, top_k,
                             seed, max_new_tokens, stop, draft_skip, strict)  # before the imports below, which take seconds
    from minispark.serving.generate import DEFAULT_PROMPT, generate as run_generate
    from minispark.target.sampling import SamplingConfig
    from minispark.serving.builder import build_serving

    sampling = SamplingConfig(temperature, top_k=top_k, top_p=top_p)
    loaded = _decoding_target(drafter, target, dtype, device, load_in_4bit, load_in_8bit)
    setup = build_serving(loaded, drafter, mode, gamma, threshold, sps, sampling, strict, draft_skip=draft_skip)
    checks.threshold_mode(threshold, setup.mode)  # the mode chosen for the run (--mode not given)
    checks.schedule_mode(sps, strict, setup.mode)
    for hint in setup.hints:  # one line each, verbatim (a path may hold "[")
        err_console.print(f"[dim]{escape(hint)}[/dim]", highlight=False, soft_wrap=True)
    draft, policy = setup.drafter, setup.policy
    on_text = None if as_json else (lambda text: console.print(text, end="", highlight=False, markup=False))
    try:
        out = run_generate(loaded, prompt or DEFAULT_PROMPT, images=image, drafter=draft, sampling=sampling,
                           policy=policy, max_new_tokens=max_new_tokens, stop_strings=stop, seed=seed,
                           on_text=on_text, skip=setup.skip)
    except KeyboardInterrupt:
        if on_text is not None:
            console.print()  # the streamed text's line ends: "interrupted" was printed onto its last word
        raise
    if as_json:
        _print_json(out.as_dict(loaded, draft))
        return
    stats = out.result.stats
    console.print()
    err_console.print(f"[dim]{stats.new_tokens} tokens in {stats.wall_s:.2f}s ({stats.tokens_per_s:.1f} tok/s), "
                      f"{stats.rounds} rounds, tau={stats.tau:.2f}, drafter={draft.name}, stop={out.result.stop_reason}, "
                      f"{escape(loaded.threads_line())}[/dim]")


@app.command()
@one_line_errors
def chat(
    target: Optional[str] = TargetOpt,
    drafter: Optional[str] = DrafterOpt,
    image: list[Path] = typer.Option([], "--image", help="Image file for the first message (repeat --image for "
                                     "more; /image PATH later)."),
    mode: Optional[str] = typer.Option(None, "--mode", help="fixed | threshold | schedule | tree (default: tree with "
                                                           "a trained drafter, else schedule with an SPS table, else "
                                                           "threshold; fixed without confidences)."),
    gamma: Optional[int] = GammaOpt,
    threshold: Optional[float] = ThresholdOpt,
    sps: Optional[Path] = typer.Option(None, "--sps", help="SPS table JSON (default: the one for this device)."),
    strict: bool = StrictOpt,
    draft_skip: Optional[bool] = DraftSkipOpt,
    temperature: float = TemperatureOpt,
    top_p: float = TopPOpt,
    top_k: int = TopKOpt,
    system: Optional[str] = typer.Option(None, "--system", help="System message (default: the chat template's own, "
                                         "if any; an empty one is refused, as generate refuses an empty --prompt)."),
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
    drafter = _check_serving(None, image, drafter, mode, gamma, threshold, sps, temperature, top_p, top_k, seed,
                             max_new_tokens, stop, draft_skip, strict)  # before the imports below, which take seconds
    checks.system_message(system)
    from minispark.chat import ChatREPL
    from minispark.serving.conversation import Conversation
    from minispark.target.sampling import SamplingConfig
    from minispark.serving.builder import build_serving

    sampling = SamplingConfig(temperature, top_k=top_k, top_p=top_p)
    loaded = _decoding_target(drafter, target, dtype, device, load_in_4bit, load_in_8bit)
    if image and not loaded.is_vlm:
        raise MinisparkError(f"--image: target {loaded.name} is text-only ({loaded.model_type})")
    setup = build_serving(loaded, drafter, mode, gamma, threshold, sps, sampling, strict, draft_skip=draft_skip)
    checks.threshold_mode(threshold, setup.mode)  # the mode chosen for the run (--mode not given)
    checks.schedule_mode(sps, strict, setup.mode)
    with Conversation(loaded, setup.drafter, policy=setup.policy, sampling=sampling, max_new_tokens=max_new_tokens,
                      system=system, stop_strings=stop, seed=seed, skip=setup.skip) as conversation:
        ChatREPL(conversation, setup, console, show_stats=stats).run(images=image)


@app.command()
@one_line_errors
def serve(
    target: Optional[str] = TargetOpt,
    drafter: Optional[str] = DrafterOpt,
    mode: Optional[str] = typer.Option(None, "--mode", help="fixed | threshold | schedule | tree (default: tree with "
                                       "a trained drafter, else schedule with an SPS table; with several requests "
                                       "in flight, Algorithm 1 runs across them: over chains in schedule mode, over "
                                       "every request's tree nodes in tree mode, priced on the batched grid)."),
    gamma: Optional[int] = GammaOpt,
    sps: Optional[Path] = typer.Option(None, "--sps", help="SPS table JSON (default: the one for this device)."),
    host: str = typer.Option(limits.SERVE_HOST, "--host", help="Address to bind; anything but loopback is "
                             "reachable from the network (use --api-key)."),
    port: int = typer.Option(limits.SERVE_PORT, "--port", help="TCP port."),
    api_key: Optional[str] = typer.Option(None, "--api-key", envvar=defaults.API_KEY_ENV,
                                          help="Require 'Authorization: Bearer KEY' on /v1 routes."),
    max_concurrent: Optional[int] = typer.Option(None, "--max-concurrent", help="Requests decoded together, "
                                                 "verified in one forward (default: 8 on CUDA, 4 on a CPU)."),
    queue: int = typer.Option(limits.SERVE_QUEUE, "--queue", help="Requests waiting for a slot before 429 (0: "
                              "none wait; a request is served only when a slot is free)."),
    max_tokens: int = typer.Option(limits.SERVE_MAX_TOKENS, "--max-tokens", help="Largest max_tokens a request may ask."),
    image_dir: Optional[Path] = typer.Option(None, "--image-dir", help="Directory image_url file paths may name "
                                             "(default: none; data: URLs only, never a network fetch)."),
    allow_host: Optional[list[str]] = typer.Option(None, "--allow-host", help="A host name requests may address "
                                                   "the server by, besides IP addresses and localhost (repeatable; "
                                                   "others get 403: DNS rebinding)."),
    dtype: Optional[str] = DtypeOpt,
    device: Optional[str] = DeviceOpt,
    load_in_4bit: bool = FourBitOpt,
    load_in_8bit: bool = EightBitOpt,
) -> None:
    """Serve the target as an OpenAI-compatible API (/v1/chat/completions, /v1/completions, /v1/models, /health); Ctrl-C drains."""
    drafter = checked_drafter(drafter, drafting={"--mode": mode, "--gamma": gamma, "--sps": sps})
    checks.choice(mode, "--mode", checks.MODES)
    checks.integer(gamma, "--gamma", 1)
    checks.schedule_mode(sps, False, mode)
    checked_sps(sps)
    port = checks.listen_address(host, port)  # --port 0: the free port picked now, printed below
    # an empty variable (`export MINISPARK_API_KEY=$KEY` with KEY unset) reads as no key at all: serving open
    if (api_key is not None and not api_key.strip()) or (api_key is None and os.environ.get(defaults.API_KEY_ENV) == ""):
        raise MinisparkError(f"--api-key (or ${defaults.API_KEY_ENV}): empty; omit it (and unset the variable) to serve "
                             "without a key")
    key = api_key or ""
    odd = next((char for char in key if not " " <= char <= "~"), " " if key != key.strip() else None)
    if odd is not None:  # a client sends the key in its Authorization header, which cannot carry it: no request passes
        raise MinisparkError(f"--api-key (or ${defaults.API_KEY_ENV}): holds {odd!r}, which no HTTP client can send in "
                             "an Authorization header (every request would be refused); use visible ASCII characters, "
                             "no space at either end")
    checks.integer(max_concurrent, "--max-concurrent", 1, limits.SERVE_MAX_SLOTS)
    checks.integer(queue, "--queue", 0)
    checks.integer(max_tokens, "--max-tokens", 1)
    checks.input_dir(image_dir, "--image-dir")  # a missing one was "not a directory"
    allowed = tuple(checks.host_name(name, "--allow-host") for name in allow_host or ())
    from minispark.server.app import ServeConfig, run_server, served_model_id, server_url  # seconds: after the checks
    from minispark.server.protocol import ServeLimits
    from minispark.serving.builder import build_serving

    loaded = _decoding_target(drafter, target, dtype, device, load_in_4bit, load_in_8bit)
    setup = build_serving(loaded, drafter, mode, gamma, sps=sps)
    checks.schedule_mode(sps, False, setup.mode)  # the mode chosen for the run (--mode not given)
    for hint in setup.hints:
        err_console.print(f"notice: {hint}", highlight=False, soft_wrap=True, markup=False)
    slots = max_concurrent or limits.serve_slots(loaded.device.type)
    request_limits = ServeLimits(max_tokens=max_tokens, queue=queue,
                                 default_max_tokens=min(limits.SERVE_DEFAULT_MAX_TOKENS, max_tokens))
    config = ServeConfig(served_model_id(loaded), api_key=api_key, limits=request_limits, image_dir=image_dir,
                         allowed_hosts=(*allowed, host), slots=slots)
    if host not in ("127.0.0.1", "localhost", "::1") and not api_key:
        err_console.print(f"notice: --host {host} is reachable from the network and no --api-key is set",
                          highlight=False, markup=False)
    err_console.print(f"serving {config.model_id} ({setup.drafter_spec}, {setup.mode}, {slots} in flight) on "
                      f"{server_url(host, port)}/v1 — Ctrl-C drains and exits", highlight=False, markup=False)
    run_server(loaded, setup, config, host, port)


@app.command()
@one_line_errors
def demo(
    train: bool = typer.Option(False, "--train", help="Run the whole pipeline at small scale (cache → train → "
                               "calibrate → profile → bench → chat), reusing finished stages."),
    out: Path = typer.Option(Path("runs/demo"), "--out", help="Pipeline directory (with --train): new, empty, or "
                             "an earlier --train run's (its finished stages reused)."),
    target: Optional[str] = TargetOpt,
    drafter: Optional[str] = typer.Option(None, "--drafter", help="none | lookup | a checkpoint DIR (default: the "
                                                                  "shipped drafter, else lookup; not with --train)."),
    num_prompts: int = typer.Option(3, "--num-prompts", help="Held-out chat/code prompts (the file's tail)."),
    max_new_tokens: int = typer.Option(96, "--max-new-tokens", help="Tokens per answer."),
) -> None:
    """Show the speedup: target-only vs the shipped drafter on held-out prompts (--train: build your own)."""
    from minispark.measuring.bench_report import render_bench
    from minispark.demo import PipelineSizes, check_out, render_demo, run_demo, run_pipeline
    from minispark.measuring.profiler import rich_progress

    checks.integer(num_prompts, "--num-prompts", 1)
    checks.integer(max_new_tokens, "--max-new-tokens", 1)
    if not train:
        if typed_on_command_line("out"):  # the plain demo writes nothing: --out was ignored without a word
            raise MinisparkError(f"--out {out}: only demo --train writes a pipeline directory (the plain demo keeps "
                                 "nothing); add --train or drop --out")
        checked_drafter(drafter)

        def notice(line: str) -> None:
            err_console.print(f"[yellow]{escape(line)}[/yellow]", highlight=False, soft_wrap=True)

        loaded = _load(target, None, None)
        with rich_progress(True, label="demo") as progress:
            result = run_demo(loaded, drafter=drafter, num_prompts=num_prompts, max_new_tokens=max_new_tokens,
                              progress=progress, log=notice)
        console.print(render_demo(result))
        return
    if drafter is not None:
        raise MinisparkError("--drafter: not with --train (the pipeline trains its own)")
    check_out(out)  # new, empty, or an earlier pipeline's: never beside someone's files
    _check_target_flags(target, None, None)
    sizes = PipelineSizes(bench_prompts=num_prompts, bench_tokens=max_new_tokens)
    result = run_pipeline(out, sizes, target=target, log=lambda line: err_console.print(line, highlight=False,
                                                                                        markup=False))
    console.print(f"\n[bold]chat[/bold] ▶ {escape(result.chat_prompt)}", highlight=False)
    console.print(result.chat_answer, highlight=False, markup=False)
    console.print(render_bench(result.bench))
    console.print(f"continue with: {result.chat_command}", highlight=False, soft_wrap=True, markup=False)
