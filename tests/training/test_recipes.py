"""Recipe files: every file under ``recipes/`` loads (recursively), shows its launch command and
gets a memory estimate; overrides are typed and bad keys or values fail in one line.

    .venv/bin/python -m pytest -q tests/training/test_recipes.py
"""

from __future__ import annotations

from pathlib import Path

import pytest

from minispark.core.errors import MinisparkError
from minispark.training.memory import estimate_memory
from minispark.core.defaults import RECIPE_DIR
from minispark.training.recipes import TrainConfig, launch_command, list_recipes, load_recipe, read_recipe_file

FILES = sorted(RECIPE_DIR.rglob("*"))


def test_the_shipped_recipes_are_there():
    assert {"rtx3050", "cpu-smollm2", "tiny"} <= set(list_recipes())
    assert all(p.suffix == ".toml" for p in FILES if p.is_file()), "recipes/ holds only recipe files"


@pytest.mark.parametrize("path", [p for p in FILES if p.is_file()], ids=lambda p: p.name)
def test_every_recipe_file_loads(path: Path):
    config = load_recipe(path)
    assert config.name == path.stem
    first = path.read_text().splitlines()[0]
    assert first.startswith(f"# minispark train --recipe {path.stem}") and launch_command(path) == first[2:]
    # every key in the file took effect (no silently ignored settings)
    for key, value in read_recipe_file(path).items():
        assert getattr(config, key) == value, key
    breakdown = estimate_memory(config)
    assert 0 < breakdown.predicted_peak < 6e9
    assert breakdown.to_json()["predicted_peak_gb"] == round(breakdown.predicted_peak / 1e9, 4)


def test_rtx3050_settings():
    config = load_recipe("rtx3050")
    assert (config.block_size, config.markov_rank, config.num_layers) == (7, 256, 2)
    assert 32 <= config.batch_anchors <= 64 and config.lr == 6e-4 and config.warmup_frac == 0.04
    assert (config.compute_dtype, config.optimizer_name) == ("bf16", "adamw8bit")
    assert (config.alpha_ce, config.alpha_tv, config.alpha_conf, config.loss_decay_gamma) == (0.1, 0.9, 1.0, 4.0)


@pytest.mark.parametrize("kernels", [True, False])
def test_auto_dtype_is_bf16_where_the_cpu_has_bf16_kernels(monkeypatch, kernels):
    """dtype = "auto" on a CPU: bf16 autocast where oneDNN has bf16 kernels (a step 1.5-2.8× faster there),
    fp32 where bf16 is emulated."""
    from minispark.target import runtime

    monkeypatch.setattr(runtime, "cpu_bf16_kernels", lambda: kernels)
    config = load_recipe("tiny", ["dtype=auto", "device=cpu"])
    assert config.compute_dtype == ("bf16" if kernels else "fp32")


def test_overrides_are_typed():
    config = load_recipe("tiny", ["steps=7", "train.lr=1e-3", "feature_layers=1,2", "grad_checkpointing=yes",
                                  "mask_token_id=none", "head=rnn"])
    assert (config.steps, config.lr, config.feature_layers) == (7, 1e-3, [1, 2])
    assert config.grad_checkpointing is True and config.mask_token_id is None and config.head == "rnn"
    assert isinstance(load_recipe("tiny", ["lr=1"]).lr, float)


@pytest.mark.parametrize("override, message", [
    ("stepz=3", r"override: unknown recipe key 'stepz' \(did you mean 'steps'\?\)"),
    ("steps=many", r"override 'steps=many': steps must be int, got 'many'"),
    ("grad_checkpointing=maybe", "grad_checkpointing must be bool"),
    ("loss.steps=3", "unknown recipe key 'loss.steps'"),
    ("steps", "expected key=value"),
    ("head=crf", "head: 'crf' is not one of"),
    ("steps=0", "steps: must be a finite number > 0"),
    ("warmup_frac=1.5", "warmup_frac: must be in"),
])
def test_bad_overrides_fail_in_one_line(override, message):
    with pytest.raises(MinisparkError, match=message) as info:
        load_recipe("tiny", [override])
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("body, message", [
    ("[train]\nstepz = 3\n", "unknown recipe key 'train.stepz'"),
    ("[train]\nsteps = '3'\n", r"\[train\]: steps must be int, got '3'"),
    ("[draft]\nsteps = 3\n", r"steps belongs in \[train\], not \[draft\]"),
    ("[model]\nsteps = 3\n", r"unknown section \[model\]"),
    ("[train\n", "unreadable recipe"),
    # tomllib's "Cannot overwrite a value (at line 4, column 10)"
    ("[train]\nsteps = 3\nsteps = 4\n", r"bad.toml:4: steps is given twice; give each key once$"),
    ("[train]\nsteps = 3\n[train]\nlr = 0.1\n", r"bad.toml:4: section \[train\] is declared twice"),
])
def test_bad_recipe_files_name_file_and_key(tmp_path, body, message):
    path = tmp_path / "bad.toml"
    path.write_text("# minispark train --recipe bad.toml\n" + body)
    with pytest.raises(MinisparkError, match=message) as info:
        load_recipe(path)
    assert str(info.value).startswith(str(path)) and "\n" not in str(info.value)


def test_unknown_recipe_lists_the_shipped_ones():
    with pytest.raises(MinisparkError, match="no such file or shipped recipe.*tiny"):
        load_recipe("nope")


def test_config_round_trips_through_json():
    config = load_recipe("cpu-smollm2", ["seed=5"])
    assert TrainConfig.from_dict(config.to_dict()) == config


def test_mask_token_is_checked(tiny_dir) -> None:
    from minispark.training.draft_sizes import check_mask_token
    from minispark.target.loading import load_target

    target = load_target(str(tiny_dir("llama")))
    check_mask_token(16, target)  # <empty_output>: a special token no template uses
    im_start = target.tokenizer.convert_tokens_to_ids("<|im_start|>")
    for bad, reason in [(im_start, "chat template|EOS/BOS/PAD"), (target.tokenizer.eos_token_id, "EOS"),
                        (target.tokenizer.convert_tokens_to_ids("the"), "ordinary token"),
                        (target.vocab_size + 5, "outside the vocabulary")]:
        with pytest.raises(MinisparkError, match=reason):
            check_mask_token(bad, target)


def test_a_large_vocabulary_gets_a_draft_vocabulary_unless_the_recipe_says() -> None:
    """Unset, ``draft_vocab`` is the whole of a small vocabulary and 32,768 tokens of a large one (Gemma 3's
    262,144: its Markov tables alone were 77M parameters); a recipe's own value, 0 included, stands."""
    from minispark.training.draft_sizes import draft_config, recipe_dims
    from minispark.training.memory import estimate_memory

    def drafted(*overrides: str) -> int:
        config = load_recipe("tiny", list(overrides))
        return draft_config(config, recipe_dims(config), feature_layers=[1], mask_token_id=0).draft_vocab

    assert drafted() == 0  # SmolLM2's 49,152
    assert drafted("vocab_size=262144", "hidden_size=640") == 32_768
    assert drafted("vocab_size=262144", "hidden_size=640", "draft_vocab=0") == 0
    assert drafted("vocab_size=262144", "hidden_size=640", "draft_vocab=8192") == 8192
    large = estimate_memory(load_recipe("tiny", ["vocab_size=262144", "hidden_size=640"]))
    full = estimate_memory(load_recipe("tiny", ["vocab_size=262144", "hidden_size=640", "draft_vocab=0"]))
    assert large.trainable_params < full.trainable_params and large.predicted_peak < full.predicted_peak
