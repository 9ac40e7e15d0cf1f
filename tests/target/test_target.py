"""Target loading, hidden-state capture and one-line errors for bad input (API and CLI)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from minispark.cli import app
from minispark.core.errors import MinisparkError
from minispark.target.loading import Target, load_target


@pytest.fixture(scope="module")
def tiny_llama(tiny_dir) -> Target:
    return load_target(str(tiny_dir("llama")))


def test_unknown_target_is_one_line_error() -> None:
    with pytest.raises(MinisparkError, match="no such directory") as info:
        load_target("/definitely/not/here")
    assert "\n" not in str(info.value)
    with pytest.raises(MinisparkError, match="target nobody/no-such-model") as info:
        load_target("nobody/no-such-model")
    assert "\n" not in str(info.value)


def test_image_for_text_only_target(tiny_llama: Target, test_image) -> None:
    with pytest.raises(MinisparkError, match="text-only") as info:
        tiny_llama.encode(prompt="hi", images=[test_image])
    assert tiny_llama.name in str(info.value)


def test_missing_image(tiny_dir) -> None:
    target = load_target(str(tiny_dir("qwen2_5_vl")))
    with pytest.raises(MinisparkError, match="image not found: .*nope.png"):
        target.encode(prompt="hi", images=["nope.png"])
    with pytest.raises(MinisparkError, match="a directory, not an image file"):  # said "image not found"
        target.encode(prompt="hi", images=[Path(__file__).parent])


def test_final_layer_refused(tiny_llama: Target) -> None:
    last = tiny_llama.num_layers - 1
    with pytest.raises(MinisparkError, match="final decoder layer"):
        tiny_llama.session([1, last])
    with pytest.raises(MinisparkError, match="out of range"):
        tiny_llama.check_layers([tiny_llama.num_layers + 3])


def test_identity_ignores_the_transformers_release_that_saved_the_config(tiny_dir, tmp_path: Path) -> None:
    """The same weights saved under another transformers release are the same target; a changed setting is not."""
    import shutil

    from minispark.core.identity import files_hash

    patterns = ("config.json", "*.safetensors")
    original = tiny_dir("llama")
    copy = Path(shutil.copytree(original, tmp_path / "resaved"))
    config = json.loads((copy / "config.json").read_text())
    config["transformers_version"] = "0.0.1"
    (copy / "config.json").write_text(json.dumps(config, indent=4))  # another layout, too
    assert files_hash(copy, patterns) == files_hash(original, patterns)
    config["rms_norm_eps"] = 0.5
    (copy / "config.json").write_text(json.dumps(config))
    assert files_hash(copy, patterns) != files_hash(original, patterns)


def test_auto_layers_spread_and_never_last(tiny_llama: Target) -> None:
    layers = tiny_llama.auto_layers()
    assert tiny_llama.num_layers - 1 not in layers and layers == sorted(set(layers))
    # The design notes' example: 36 layers → 1, 9, 17, 25, 33.
    tiny_llama.num_layers = 36
    try:
        assert tiny_llama.auto_layers() == [1, 9, 17, 25, 33]
    finally:
        tiny_llama.num_layers = tiny_llama.text_config.num_hidden_layers


@pytest.mark.parametrize("family", ["llama", "qwen2_5_vl"])
def test_capture_matches_output_hidden_states(tiny_dir, test_image, family: str) -> None:
    """Hooked layer outputs equal transformers' hidden_states[i+1]; the final hidden is post-norm."""
    target = load_target(str(tiny_dir(family)))
    images = [test_image] if target.is_vlm else []
    inputs = target.encode(prompt="Look at this.", images=images)
    features, final = target.capture(inputs, [0, 2])
    kwargs = dict(inputs.model_kwargs)
    if inputs.position_ids is not None:
        kwargs["position_ids"] = inputs.position_ids
    with torch.no_grad():
        out = target.model(input_ids=inputs.input_ids, output_hidden_states=True, **kwargs)
    torch.testing.assert_close(features[:, 0], out.hidden_states[1][0])
    torch.testing.assert_close(features[:, 1], out.hidden_states[3][0])
    torch.testing.assert_close(final, out.hidden_states[-1][0])  # transformers 5.x: last entry is post-norm
    logits = target.lm_head(final)
    torch.testing.assert_close(logits, out.logits[0].float())


def test_text_positions_follow_mrope_temporal_component(tiny_dir, test_image) -> None:
    target = load_target(str(tiny_dir("qwen2_5_vl")))
    inputs = target.encode(prompt="What is this?", images=[test_image])
    assert inputs.position_ids is not None
    assert torch.equal(inputs.text_positions, inputs.position_ids[0, 0].cpu())
    extended = target.extend(inputs, torch.tensor([5, 6]))
    assert extended.text_positions[-2:].tolist() == [int(inputs.text_positions[-1]) + 1,
                                                      int(inputs.text_positions[-1]) + 2]


@pytest.mark.parametrize("bits", [4, 8])
def test_quantized_target_generates(tiny_dir, bits: int) -> None:
    pytest.importorskip("bitsandbytes")
    from minispark.serving.generate import generate

    target = load_target(str(tiny_dir("llama")), load_in_4bit=bits == 4, load_in_8bit=bits == 8)
    assert type(target.decoder.layers[0].mlp.down_proj).__module__.startswith("bitsandbytes")
    out = generate(target, "Hello", drafter="lookup", max_new_tokens=8)
    assert len(out.result.token_ids) == 8


def test_stop_strings_cut_after_the_first_occurrence(tiny_llama: Target) -> None:
    from minispark.serving.generate import generate

    full = generate(tiny_llama, "Hello there", drafter="lookup", max_new_tokens=24)
    stop = full.text[5:9]
    assert stop.strip(), full.text
    out = generate(tiny_llama, "Hello there", drafter="lookup", max_new_tokens=24, stop_strings=[stop])
    assert out.result.stop_reason == "stop" and stop in out.text
    assert full.result.token_ids[: len(out.result.token_ids)] == out.result.token_ids
    shorter = tiny_llama.tokenizer.decode(out.result.token_ids[:-1], skip_special_tokens=True)
    assert stop not in shorter  # the shortest prefix that contains the stop string


def test_cli_generate_json(tiny_dir) -> None:
    result = CliRunner().invoke(app, ["generate", "--target", str(tiny_dir("llama")), "--prompt", "Hello there",
                                      "--drafter", "lookup", "--max-new-tokens", "12", "--json", "--seed", "3"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    for key in ("text", "token_ids", "rounds", "tau", "acceptance_per_position", "tokens_per_s", "target",
                "drafter"):
        assert key in data
    assert len(data["token_ids"]) == 12 and data["drafter"] == "lookup"


@pytest.mark.parametrize("args, culprit", [
    (["--target", "/no/such/dir"], "--target /no/such/dir"),
    (["--image", "/no/such.png"], "--image /no/such.png"),
    (["--temperature", "-1"], "--temperature"),
    (["--drafter", "bogus"], "--drafter bogus"),
])
def test_cli_bad_input_is_one_line(tiny_dir, args: list[str], culprit: str) -> None:
    base = ["generate", "--max-new-tokens", "2"]
    if "--target" not in args:
        base += ["--target", str(tiny_dir("llama"))]
    result = CliRunner().invoke(app, base + args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and culprit in lines[0], result.stderr


def test_a_pickle_target_is_the_target_its_record_names(tiny_dir, tmp_path: Path) -> None:
    """check_target hashes a directory as the loader's identity does: a target with pickle weights only (loaded with
    --allow-pickle-weights) matches its own record, and another pickle file is another target."""
    import shutil

    from minispark.core.identity import target_id, weights_hash
    from minispark.target.remembered import TargetRecord, check_target

    pickled = Path(shutil.copytree(tiny_dir("llama"), tmp_path / "pickled"))
    for file in pickled.glob("*.safetensors"):
        file.unlink()
    (pickled / "pytorch_model.bin").write_bytes(b"weights, pickled")
    identity = target_id({"name": str(pickled.resolve()), "weights_hash": weights_hash(pickled)})
    record = TargetRecord(source=str(pickled.resolve()), identity=identity)
    check_target(record, str(pickled), "the drafter")  # its own target: no error
    (pickled / "pytorch_model.bin").write_bytes(b"other weights, pickled")
    with pytest.raises(MinisparkError, match="another target"):
        check_target(record, str(pickled), "the drafter")


def test_a_second_conversion_of_the_embedded_target_keeps_the_first(tmp_path: Path) -> None:
    """Two commands started at once on a fresh machine both converted the GGUF; the second's rename onto the
    first's model directory raised `OSError: Directory not empty` as a traceback. It now keeps the first."""
    from minispark.target.embedded import publish

    out, tmp = tmp_path / "SmolLM2-135M-Instruct", tmp_path / ".SmolLM2-135M-Instruct-x"
    out.mkdir()
    (out / "config.json").write_text("{}")
    tmp.mkdir()
    (tmp / "config.json").write_text('{"second": true}')
    publish(tmp, out)
    assert not tmp.exists() and (out / "config.json").read_text() == "{}"
    # A directory there that is not a converted model is the user's: left alone, and the error says what it is.
    (out / "config.json").unlink()
    (out / "notes.txt").write_text("mine")
    tmp.mkdir()
    (tmp / "config.json").write_text("{}")
    with pytest.raises(MinisparkError, match="not a model minispark converted"):
        publish(tmp, out)
    assert (out / "notes.txt").read_text() == "mine"


def test_the_converted_embedded_target_carries_no_loader_marker(tmp_path: Path, monkeypatch) -> None:
    """The embedded target's model directory loads in other tools (vLLM refuses ``quant_method: gguf``): its
    config carries no GGUF loader ``quantization_config``, and a conversion made before is rewritten once, keeping
    every other setting; artifacts that recorded the target's hash from before still name it."""
    from minispark.core.defaults import USER_DIR_ENV
    from minispark.core.identity import RETIRED_HASHES, same_target
    from minispark.target.embedded import EMBEDDED_NAME, embedded_model_dir

    real = json.loads((embedded_model_dir() / "config.json").read_text())
    assert "quantization_config" not in real and real["model_type"] == "llama"
    monkeypatch.setenv(USER_DIR_ENV, str(tmp_path))
    old = tmp_path / "models" / EMBEDDED_NAME
    old.mkdir(parents=True)
    (old / "config.json").write_text(json.dumps({**real, "quantization_config": {"quant_method": "gguf"}}))
    assert json.loads((embedded_model_dir() / "config.json").read_text()) == real
    (retired, current), = RETIRED_HASHES.items()
    assert same_target(f"{EMBEDDED_NAME}@{retired}", f"{EMBEDDED_NAME}@{current}")
    assert not same_target(f"{EMBEDDED_NAME}@{retired}", f"{EMBEDDED_NAME}@{'0' * 16}")  # the negative control
