"""``minispark demo``: the speedup shown on held-out prompts, and the whole pipeline at small scale.

``run_demo`` runs a few held-out chat and code prompts (the tail of ``heldout.jsonl``) on the target
in target-only mode and with the shipped drafter in its default mode (tree rounds), side by side through
``bench.run_bench``, and keeps the answers. Without a shipped drafter it falls back to ``lookup``.

``run_pipeline`` (``minispark demo --train``) runs cache → train → calibrate → profile → bench →
chat on the shipped corpus with small sizes (``PipelineSizes``, recipe ``demo-smollm2``). Every
finished stage leaves a marker ``<out>/stages/<stage>.json`` with its settings and result; a rerun
reuses a stage whose marker matches, as long as no stage before it had to run again. The cache and
the training run resume by themselves when interrupted mid-stage.

    minispark demo && minispark demo --train --out runs/demo
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from minispark.core import checks
from minispark.core.atomic import write_text_atomic
from minispark.core.defaults import HELDOUT_FILE
from minispark.measuring.bench import BenchConfig, BenchPrompt, Mode, ProgressFn, build_modes, run_bench
from minispark.core.drafter_spec import LOOKUP, NONE, DrafterSpec
from minispark.core.errors import MinisparkError, option
from minispark.data.prompts import PromptSample, load_prompts
from minispark.target.embedded import EMBEDDED_SPELLINGS
from minispark.target.loading import Target, load_target
from minispark.training.recipes import TrainConfig
from minispark.core.writer_lock import sole_writer

DEMO_CATEGORIES = ("chat", "code")
STAGES = ("cache", "train", "calibrate", "profile", "bench", "chat")
#: Stages whose directory cannot be redone in place with other settings.
RESUMING_STAGES = ("cache", "train")
#: What the pipeline writes into its ``--out``: the cache, the training run, the stage markers, the SPS table.
PIPELINE_WRITES = ("cache", "draft", "stages", "sps_tables")
LogFn = Callable[[str], None]


# ---------------------------------------------------------------------- prompts
def demo_samples(count: int, path: str | Path = HELDOUT_FILE, skip: int = 0) -> list[PromptSample]:
    """The last ``count`` chat/code prompts of the held-out file (after dropping the last ``skip``
    of them), in file order. Held-out prompts never enter a training cache."""
    if count < 1:
        raise MinisparkError(f"{option('num_prompts')} must be >= 1, got {count}")
    chosen = [s for s in load_prompts(path) if s.category in DEMO_CATEGORIES and not s.images]
    chosen = chosen[: len(chosen) - skip]
    if len(chosen) < count:
        raise MinisparkError(f"{path}: only {len(chosen)} chat/code prompts, {option('num_prompts')} asks for {count}")
    return chosen[-count:]


def bench_prompts(target: Target, samples: Sequence[PromptSample]) -> list[BenchPrompt]:
    return [BenchPrompt(target.encode(**s.encode_kwargs()), s.id or s.category or f"line {s.line}") for s in samples]


def prompt_text(sample: PromptSample) -> str:
    """The last user message of a prompt sample, for printing."""
    kwargs = sample.encode_kwargs()
    if kwargs.get("prompt"):
        return str(kwargs["prompt"])
    content = kwargs["messages"][-1]["content"]
    return content if isinstance(content, str) else " ".join(c.get("text", "") for c in content)


# ---------------------------------------------------------------------- the quick demo
@dataclass
class DemoResult:
    """The bench report of the demo modes, and every mode's answer per prompt."""

    report: dict
    drafter: str
    drafting_mode: str
    prompts: list[str]
    answers: dict[str, list[str]]  # mode → decoded answer per prompt
    notices: list[str] = field(default_factory=list)

    @property
    def speedup(self) -> float:
        return self.report["summary"][self.drafting_mode]["speedup_vs_target"]


def _recording(mode: Mode, answers: dict[int, list[int]], index_of: dict[int, int]) -> Mode:
    """``mode`` whose runs on the demo prompts also store the generated ids (warmup runs are not kept)."""

    def run(inputs, max_new_tokens: int, seed: int):
        ids, stats = mode.run(inputs, max_new_tokens, seed)
        if id(inputs) in index_of:
            answers[index_of[id(inputs)]] = ids
        return ids, stats

    return Mode(mode.name, run, mode.drafting)


def compare_modes(target: Target, drafter: str, modes: Sequence[str], samples: Sequence[PromptSample],
                  config: BenchConfig, sps: str | Path | None = None,
                  progress: ProgressFn | None = None) -> tuple[dict, dict[str, list[str]]]:
    """``bench.run_bench`` on ``samples`` in ``modes``, plus every mode's decoded answers."""
    config = replace(config, modes=list(modes))
    prompts = bench_prompts(target, samples)
    runnable, notices = build_modes(target, config, drafter, sps)
    index_of = {id(p.inputs): i for i, p in enumerate(prompts)}
    ids: dict[str, dict[int, list[int]]] = {m.name: {} for m in runnable}
    recorded = [_recording(m, ids[m.name], index_of) for m in runnable]
    report = run_bench(target, recorded, prompts, config, progress, drafter=drafter, notices=notices)
    answers = {name: [target.tokenizer.decode(by_prompt[i], skip_special_tokens=True).strip()
                      for i in range(len(prompts))] for name, by_prompt in ids.items()}
    return report, answers


def resolve_drafter(target: Target, drafter: str | None) -> tuple[str, str, list[str]]:
    """(drafter spec, the drafting mode to show, notices): the shipped drafter in its default mode
    (``builder.default_mode``, with a table: bench prices on the generic curve without one), else ``lookup``
    with a one-line notice."""
    from minispark.serving.builder import default_mode
    from minispark.serving.generate import make_drafter, shipped_drafter

    kind = None if drafter is None else DrafterSpec.parse(drafter).kind
    if kind in (LOOKUP, NONE):
        return drafter, "lookup" if kind == LOOKUP else "target", []
    if drafter is not None:
        return drafter, default_mode(make_drafter(drafter, target), True), []
    draft, opened, unusable = shipped_drafter(target)
    if draft is not None:
        return str(opened), default_mode(draft, True), []
    why = unusable or f"no shipped drafter for {target.name} under drafters/"
    return "lookup", "lookup", [f"{why}: showing the lookup drafter instead (train one: minispark demo --train)"]


def run_demo(target: Target | None = None, *, drafter: str | None = None, num_prompts: int = 3,
             max_new_tokens: int = 96, sps: str | Path | None = None, progress: ProgressFn | None = None,
             log: LogFn | None = None) -> DemoResult:
    """Target-only vs the (shipped) drafter on the held-out tail, greedy, one repeat after a warmup.
    ``log`` gets the one-line notices (e.g. the lookup fallback) before the run starts."""
    samples = demo_samples(num_prompts)
    target = target or load_target()
    spec, mode, notices = resolve_drafter(target, drafter)
    for notice in notices if log is not None else ():
        log(notice)
    modes = ["target"] if mode == "target" else ["target", mode]
    config = BenchConfig(modes=modes, max_new_tokens=max_new_tokens)
    report, answers = compare_modes(target, spec, modes, samples, config, sps, progress)
    for notice in report["notices"] if log is not None else ():
        log(notice)
    return DemoResult(report, spec, mode, [prompt_text(s) for s in samples], answers,
                      notices + list(report["notices"]))


def render_demo(result: DemoResult):
    """Answers (printed once when both modes wrote the same text) and a compact comparison table."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    parts: list[Any] = []
    mode = result.drafting_mode
    for i, prompt in enumerate(result.prompts):
        parts.append(Text(f"\n▶ {prompt}", style="bold"))
        theirs, ours = result.answers["target"][i], result.answers.get(mode, result.answers["target"])[i]
        if theirs == ours:
            parts.append(Text(ours))
            parts.append(Text(f"(target-only and {mode} wrote this same text)", style="dim"))
        else:
            parts += [Text("target-only:", style="dim"), Text(theirs), Text(f"{mode}:", style="dim"), Text(ours)]
    summary = result.report["summary"]
    table = Table(title=Text(f"{result.report['target']} · drafter {result.drafter} · {len(result.prompts)} held-out "
                             f"prompts × {result.report['settings']['max_new_tokens']} tokens · "
                             f"{result.report['hardware']['device']}", style="table.title"))  # a path's "[" as text
    for column in ("mode", "tok/s", "τ", "× target", "same output"):
        table.add_column(column, justify="left" if column == "mode" else "right")
    for name, row in summary.items():
        tau = row.get("tau")
        table.add_row(name, f"{row['tokens_per_s']:.1f}", "–" if tau is None else f"{tau:.2f}",
                      f"{row['speedup_vs_target']:.2f}", "yes" if row.get("parity") else "[red]no[/red]")
    parts += [Text(""), table]
    if mode in summary and mode != "target":
        parts.append(Text(f"measured speedup of {mode} over target-only: {result.speedup:.2f}×", style="bold"))
    return Group(*parts)


# ---------------------------------------------------------------------- the pipeline
@dataclass
class PipelineSizes:
    """The size of every stage of ``minispark demo --train``. The defaults aim at ≤ 20 min on 2 idle CPU
    cores (estimated ~10 min from the stages' measured rates; not yet timed end to end)."""

    recipe: str = "demo-smollm2"
    train_overrides: list[str] = field(default_factory=list)
    cache_samples: int = 48
    cache_tokens: int = 96
    cache_batch: int = 16
    calibrate_prompts: int = 4
    calibrate_tokens: int = 64
    #: a few prompts' rounds: below ``minispark calibrate``'s CALIBRATION_MIN_ROUNDS, enough for a demo's fit
    calibrate_min_rounds: int = 16
    profile_contexts: list[int] = field(default_factory=lambda: [256])
    profile_rounds: int = 3
    bench_prompts: int = 3
    bench_tokens: int = 96
    bench_modes: list[str] = field(default_factory=lambda: ["target", "lookup", "fixed", "schedule"])
    chat_tokens: int = 96


@dataclass
class PipelineResult:
    out: Path
    drafter: Path
    sps: Path
    bench: dict
    chat_prompt: str
    chat_answer: str
    ran: list[str]  # stages run this time (the others were reused)
    target: str | None = None  # --target as given (None: the embedded one)

    @property
    def chat_command(self) -> str:
        prefix = f"minispark chat --target {self.target} " if self.target else "minispark chat "
        return f"{prefix}--drafter {self.drafter} --sps {self.sps}"


class _Stages:
    """Stage markers under ``<out>/stages``: a stage is reused when its marker has the same settings
    and no earlier stage ran in this invocation."""

    def __init__(self, out: Path, log: LogFn) -> None:
        self.dir = out / "stages"
        self.log = log
        self.ran: list[str] = []

    def marker(self, stage: str) -> dict | None:
        path = self.dir / f"{stage}.json"
        return json.loads(path.read_text()) if path.is_file() else None

    def run(self, stage: str, settings: dict, work: Callable[[], dict]) -> dict:
        number = f"[{STAGES.index(stage) + 1}/{len(STAGES)}] {stage}"
        marker = self.marker(stage)
        if marker is not None and marker["settings"] != settings and stage in RESUMING_STAGES:
            raise MinisparkError(f"{option('out')} {self.dir.parent}: its {stage} stage was made with other settings; "
                                 f"choose another {option('out')} (or delete that one)")
        if marker is not None and marker["settings"] == settings and not self.ran:
            self.log(f"{number}: reused (finished in an earlier run; {marker['seconds']:.0f} s then)")
            return marker["result"]
        self.log(f"{number}: running")
        started = time.perf_counter()
        result = work()
        seconds = time.perf_counter() - started
        self.dir.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self.dir / f"{stage}.json", json.dumps(
            {"stage": stage, "settings": settings, "seconds": seconds, "result": result}, indent=2, default=float))
        self.ran.append(stage)
        self.log(f"{number}: done in {seconds:.0f} s")
        return result


#: Recipe keys sized for the target a recipe names in its [target] section (its sizes, layer ids and head
#: shapes): for another --target they come from that target instead.
TARGET_SIZED_KEYS = ("target", "hidden_size", "vocab_size", "tie_embeddings", "feature_layers", "num_heads",
                     "num_kv_heads", "head_dim", "intermediate_size")


def pipeline_recipe(name: str, overrides: Sequence[str], target: str | None) -> tuple[TrainConfig, bool]:
    """The pipeline's recipe, and whether it was resized: a recipe sized for another target than
    ``target`` gets its target-sized keys from ``target`` (``--target`` never fails on the recipe's
    layer ids or sizes, which the user never gave)."""
    from minispark.training.recipes import load_recipe, override_key

    recipe = load_recipe(name, overrides)
    if recipe.target is None or recipe.target == target or {recipe.target, target} <= set(EMBEDDED_SPELLINGS):
        return recipe, False
    given = {override_key(item) for item in overrides}  # an override is given once
    return load_recipe(name, [f"{key}=none" for key in TARGET_SIZED_KEYS if key not in given] + list(overrides)), True


def usable_mask_token(recipe: TrainConfig, target: Target) -> TrainConfig:
    """``recipe`` with its mask token if ``target`` can use it, else with the target's own choice."""
    from minispark.training.draft_sizes import check_mask_token

    if recipe.mask_token_id is None:
        return recipe
    try:
        check_mask_token(recipe.mask_token_id, target)
        return recipe
    except MinisparkError:
        return replace(recipe, mask_token_id=None)


@dataclass
class _Pipeline:
    """What every stage of one ``run_pipeline`` call reads: its sizes, recipe, directories and the target
    (loaded once, and only when a stage has to run)."""

    out: Path
    sizes: PipelineSizes
    recipe: TrainConfig
    resized: bool  # the recipe was sized for another target (see pipeline_recipe)
    target_spec: str | None
    progress: bool
    log: LogFn
    _target: Target | None = None

    @property
    def cache_dir(self) -> Path:
        return self.out / "cache"

    @property
    def train_dir(self) -> Path:
        return self.out / "draft"

    @property
    def drafter(self) -> Path:
        return self.train_dir / "drafter"

    @property
    def target(self) -> Target:
        if self._target is None:
            self._target = load_target(self.target_spec)
        return self._target


def _cache_stage(run: _Pipeline) -> dict:
    from minispark.data.cache import CacheConfig, build_cache
    from minispark.data.cache_config import default_prompts

    sizes, recipe, t = run.sizes, run.recipe, run.target
    config = CacheConfig(prompts=default_prompts(t.is_vlm), out=run.cache_dir, target=run.target_spec,
                         num_samples=sizes.cache_samples, max_new_tokens=sizes.cache_tokens,
                         layers=recipe.feature_layers or "auto", window=recipe.window, block=recipe.block_size,
                         anchors_per_sample=recipe.anchors_per_sample, dtype=recipe.cache_dtype,
                         batch_size=sizes.cache_batch)
    report = build_cache(config, target=t, progress=run.progress, log=run.log)
    return {"samples": report.samples, "anchors": report.anchors, "bytes": report.total_bytes}


def _train_stage(run: _Pipeline) -> dict:
    from minispark.training.train import train
    from minispark.training.trainer import LATEST_FILE

    resume = (run.train_dir / LATEST_FILE).exists()
    config = usable_mask_token(run.recipe, run.target) if run.resized else run.recipe
    report = train(config, run.cache_dir, run.train_dir, resume=resume, progress=run.progress, target=run.target,
                   log=run.log)
    last = report.metrics[-1] if report.metrics else {}
    return {"drafter": str(report.drafter), "steps": report.last_step, "loss": last.get("loss"),
            "tau_proxy": last.get("tau")}


def _calibrate_stage(run: _Pipeline) -> dict:
    from minispark.core.defaults import DEFAULT_TEMPERATURE
    from minispark.measuring.rollouts import calibrate_drafter
    from minispark.target.sampling import SamplingConfig
    from minispark.serving.builder import build_serving

    sizes, t = run.sizes, run.target
    sampling = SamplingConfig(DEFAULT_TEMPERATURE)  # the temperature its bench and chat decode at
    setup = build_serving(t, str(run.drafter), "fixed", sampling=sampling)
    inputs = [p.inputs for p in bench_prompts(t, demo_samples(sizes.calibrate_prompts, skip=sizes.bench_prompts))]
    report = calibrate_drafter(t, setup.drafter, run.drafter, inputs, setup.gamma, sampling,
                               sizes.calibrate_tokens, seed=0, min_rounds=sizes.calibrate_min_rounds)
    return {"rounds": report["rounds"], "temperatures": list(report["temperatures"])}


def _profile_stage(run: _Pipeline) -> dict:
    from minispark.measuring.profiler import ProfileConfig, profile_target, rich_progress

    # A shared or busy machine is the common case for a demo: the table is written and flagged.
    config = ProfileConfig(contexts=run.sizes.profile_contexts, max_tokens=run.recipe.block_size + 1,
                           rounds=run.sizes.profile_rounds, warmup=1, cooldown_s=0.0, allow_busy=True,
                           note="minispark demo --train (short profile)")
    t = run.target
    with rich_progress(run.progress) as bar:
        table = profile_target(t, config, bar)
    return {"path": str(table.save(table.path_in(run.out / "sps_tables")))}


def _bench_stage(run: _Pipeline, sps: Path) -> dict:
    from minispark.measuring.profiler import rich_progress

    sizes, t = run.sizes, run.target
    config = BenchConfig(modes=sizes.bench_modes, max_new_tokens=sizes.bench_tokens)
    with rich_progress(run.progress, label="bench") as bar:
        report, _ = compare_modes(t, str(run.drafter), config.modes, demo_samples(sizes.bench_prompts), config,
                                  sps, bar)
    return report


def _chat_stage(run: _Pipeline, sps: Path, prompt: str) -> dict:
    from minispark.serving.conversation import Conversation
    from minispark.serving.builder import build_serving

    t = run.target
    setup = build_serving(t, str(run.drafter), "schedule", sps=sps)
    with Conversation(t, setup.drafter, policy=setup.policy, max_new_tokens=run.sizes.chat_tokens,
                      seed=0, skip=setup.skip) as conversation:
        turn = conversation.say(prompt)
    return {"answer": turn.reply, "tokens": turn.stats.new_tokens, "tokens_per_s": turn.stats.tokens_per_s,
            "tau": turn.stats.tau}


def check_out(out: Path, flag: str = option("out")) -> Path:
    """``out`` is a directory the pipeline may write into: new, empty, or an earlier pipeline's (only
    ``PIPELINE_WRITES``; each stage checks its own subdirectory). A directory of someone else's files is
    refused before anything loads, rather than filled beside them."""
    return checks.resumable_dir(out, flag, PIPELINE_WRITES)


def run_pipeline(out: str | Path = "runs/demo", sizes: PipelineSizes | None = None, *, target: str | None = None,
                 progress: bool = True, log: LogFn = print) -> PipelineResult:
    """cache → train → calibrate → profile → bench → chat at small scale, reusing finished stages."""
    with sole_writer(out):  # a second pipeline in this --out would redo and interleave its stages
        return _run_pipeline(Path(out), sizes, target, progress, log)


def _run_pipeline(out: Path, sizes: PipelineSizes | None, target: str | None, progress: bool,
                  log: LogFn) -> PipelineResult:
    out, sizes = check_out(out), sizes or PipelineSizes()
    recipe, resized = pipeline_recipe(sizes.recipe, sizes.train_overrides, target)
    run = _Pipeline(out, sizes, recipe, resized, target, progress, log)
    stages = _Stages(out, log)
    stages.run("cache", {"target": target, "samples": sizes.cache_samples, "tokens": sizes.cache_tokens,
                         "recipe": sizes.recipe}, lambda: _cache_stage(run))
    stages.run("train", {"recipe": sizes.recipe, "overrides": sizes.train_overrides}, lambda: _train_stage(run))
    stages.run("calibrate", {"prompts": sizes.calibrate_prompts, "tokens": sizes.calibrate_tokens},
               lambda: _calibrate_stage(run))
    sps = Path(stages.run("profile", {"contexts": sizes.profile_contexts, "rounds": sizes.profile_rounds},
                          lambda: _profile_stage(run))["path"])
    bench = stages.run("bench", {"prompts": sizes.bench_prompts, "tokens": sizes.bench_tokens,
                                 "modes": sizes.bench_modes}, lambda: _bench_stage(run, sps))
    chat_prompt = prompt_text(demo_samples(1, skip=sizes.bench_prompts + sizes.calibrate_prompts)[0])
    chat = stages.run("chat", {"prompt": chat_prompt, "tokens": sizes.chat_tokens},
                      lambda: _chat_stage(run, sps, chat_prompt))
    return PipelineResult(out, run.drafter, sps, bench, chat_prompt, chat["answer"], stages.ran, target)
