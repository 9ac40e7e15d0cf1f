"""Prompt-file validation (FILE:LINE errors before any work) and the shipped demo corpus."""

from __future__ import annotations

import importlib.util
import json
import re
from collections import defaultdict
from pathlib import Path

import pytest
from PIL import Image

from minispark.core.errors import MinisparkError
from minispark.data.prompts import HELDOUT_FILE, PromptFileError, heldout_keys, load_prompts, prompt_file_hash, prompt_key
from tests.helpers import REPO

CORPUS = REPO / "examples" / "prompts"


def write(path: Path, *lines: object) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


@pytest.fixture
def image(tmp_path: Path) -> Path:
    (tmp_path / "pics").mkdir()
    path = tmp_path / "pics" / "dot.png"
    Image.new("RGB", (8, 8), "red").save(path)
    return path


def test_both_forms_parse_and_images_resolve_relative_to_the_file(tmp_path, image, monkeypatch):
    path = write(tmp_path / "p.jsonl",
                 {"prompt": "Describe.", "images": ["pics/dot.png"], "id": "a", "category": "image"},
                 "",  # blank lines are skipped but still counted
                 {"messages": [{"role": "system", "content": "Be brief."},
                               {"role": "user", "content": [{"type": "image", "image": "file://pics/dot.png"},
                                                            {"type": "text", "text": "What is it?"}]},
                               {"role": "assistant", "content": "A reference answer we do not want."}]})
    monkeypatch.chdir("/")  # resolution must not depend on the working directory
    first, second = load_prompts(path)
    assert first.line == 1 and first.images == (image.resolve(),) and first.id == "a"
    assert first.encode_kwargs() == {"prompt": "Describe.", "images": [image.resolve()]}
    assert second.line == 3 and second.images == (image.resolve(),)
    messages = second.encode_kwargs()["messages"]
    assert [m["role"] for m in messages] == ["system", "user"]  # trailing assistant answer dropped
    assert messages[1]["content"][0] == {"type": "image", "image": str(image.resolve())}


def test_text_only_parts_become_string_content(tmp_path):
    path = write(tmp_path / "p.jsonl", {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "Hello "}, {"type": "text", "text": "there."}]}]})
    (sample,) = load_prompts(path)
    assert sample.encode_kwargs() == {"messages": [{"role": "user", "content": "Hello there."}]}


@pytest.mark.parametrize("line, reason", [
    ('{"prompt": "hi"', "malformed JSON"),
    ('["prompt"]', "expected a JSON object"),
    ('{"promt": "hi"}', "unknown key 'promt'"),
    ('{"prompt": "hi", "messages": []}', "exactly one of"),
    ('{"prompt": ""}', "non-empty string"),
    ('{"prompt": "hi", "images": "a.png"}', "must be a list"),
    ('{"prompt": "hi", "images": ["missing.png"]}', "image 'missing.png' is "),
    ('\ufeff{"prompt": "hi"}', "starts with a byte-order mark"),  # mid-file: two files joined
    ('{"prompt": "hi", "images": ["not_an_image.png"]}', "image 'not_an_image.png' is "),
    ('{"prompt": "hi", "images": ["https://example.com/a.png"]}', "remote image"),
    ('{"messages": [{"role": "robot", "content": "hi"}]}', "role must be one of"),
    ('{"messages": [{"role": "user", "content": "hi", "name": "x"}]}', "unknown key 'name'"),
    ('{"messages": [{"role": "user", "content": [{"type": "audio"}]}]}', "type must be 'text' or 'image'"),
    ('{"messages": [{"role": "user", "content": [{"type": "image", "image": "gone.png"}]}]}', "image 'gone.png' is "),
    ('{"messages": [{"role": "system", "content": "only a system prompt"}]}', "at least one user message"),
    ('{"messages": [{"role": "user", "content": "  "}]}', "messages[0]: a user message with no text or image"),
    ('{"messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}]}', "no text or image"),
])
def test_bad_lines_fail_with_file_and_line(tmp_path, line, reason):
    (tmp_path / "not_an_image.png").write_text("this is text, not a PNG")
    path = write(tmp_path / "bad.jsonl", {"prompt": "fine"}, "", line, {"prompt": "never reached"})
    with pytest.raises(PromptFileError) as info:
        load_prompts(path)
    message = str(info.value)
    assert message.startswith(f"{path}:3: ") and reason in message
    assert "\n" not in message and isinstance(info.value, MinisparkError)


def test_empty_file_is_refused(tmp_path):
    with pytest.raises(PromptFileError, match="no prompts"):
        load_prompts(write(tmp_path / "empty.jsonl", "", "  "))


def test_prompt_hash_covers_the_images(tmp_path, image):
    path = write(tmp_path / "p.jsonl", {"prompt": "Describe.", "images": ["pics/dot.png"]})
    before = prompt_file_hash(path)
    Image.new("RGB", (8, 8), "blue").save(image)
    assert prompt_file_hash(path) != before


@pytest.mark.parametrize("name", ["demo.jsonl", "demo_vision.jsonl"])
def test_shipped_corpus_loads(name):
    samples = load_prompts(CORPUS / name)
    categories = {s.category for s in samples}
    assert len(samples) >= 300 and {"chat", "math", "code"} <= categories
    assert len({s.id for s in samples}) == len(samples)
    images = [s for s in samples if s.images]
    if name == "demo.jsonl":
        assert not images  # the text corpus serves text-only targets such as the embedded one
    else:
        assert len(images) >= 8 and categories == {"chat", "math", "code", "image"}
        assert any(s.messages for s in images) and any(s.prompt for s in images)


def test_every_jsonl_under_examples_prompts_loads():
    files = sorted(CORPUS.glob("**/*.jsonl"))
    assert files
    for path in files:
        load_prompts(path)


def test_corpus_generator_is_deterministic(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("make_corpus", CORPUS / "make_corpus.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "HERE", tmp_path)
    module.main()
    for name in ("demo.jsonl", "demo_vision.jsonl"):
        assert (tmp_path / name).read_text() == (CORPUS / name).read_text(), f"{name} is stale: rerun make_corpus.py"
    for fresh_png in (tmp_path / "images").glob("*.png"):
        with Image.open(CORPUS / "images" / fresh_png.name) as shipped, Image.open(fresh_png) as fresh:
            assert shipped.tobytes() == fresh.tobytes()


def test_prompt_key_normalizes_text_and_ignores_form_and_answers(tmp_path, image):
    path = write(tmp_path / "p.jsonl",
                 {"prompt": "What  is\nRAM?", "id": "a"},
                 {"messages": [{"role": "user", "content": "what is RAM?"}], "category": "chat"},
                 {"messages": [{"role": "user", "content": "What is RAM?"}, {"role": "assistant", "content": "Memory."}]},
                 {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is RAM?"}]},
                 {"prompt": "What is RAM?", "images": ["pics/dot.png"]},
                 {"messages": [{"role": "user", "content": [{"type": "image", "image": "pics/dot.png"},
                                                            {"type": "text", "text": "what is ram?"}]}]},
                 {"prompt": "What is ROM?"})
    keys = [prompt_key(s) for s in load_prompts(path)]
    assert keys[0] == keys[1] == keys[2]  # whitespace, case, line form and trailing answers do not count
    assert keys[3] != keys[0]  # a system prompt does
    assert keys[4] == keys[5] != keys[0]  # the image counts by name, wherever it sits in the line
    assert keys[6] != keys[0]


def load_training_generator(monkeypatch):
    monkeypatch.syspath_prepend(str(CORPUS))  # its data modules sit beside it
    spec = importlib.util.spec_from_file_location("make_training_corpus", CORPUS / "make_training_corpus.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_training_corpus_is_up_to_date(tmp_path, monkeypatch):
    load_training_generator(monkeypatch).main(tmp_path)
    for name in ("corpus.jsonl", "heldout.jsonl", "corpus_vision.jsonl"):
        fresh, shipped = (tmp_path / name).read_bytes(), (CORPUS / name).read_bytes()
        assert fresh == shipped, f"{name} is stale: rerun make_training_corpus.py"
    for fresh_png in (tmp_path / "images").glob("*.png"):
        with Image.open(CORPUS / "images" / fresh_png.name) as shipped, Image.open(fresh_png) as fresh:
            assert shipped.tobytes() == fresh.tobytes()


def test_training_corpus_is_large_unique_mixed_and_disjoint_from_heldout():
    samples = load_prompts(CORPUS / "corpus.jsonl")
    keys = {prompt_key(s) for s in samples}
    assert len(samples) >= 10_000 and len(keys) == len(samples)
    assert len({s.id for s in samples}) == len(samples)
    assert {s.category for s in samples} == {"chat", "writing", "math", "code", "multiturn"}
    head = {s.category for s in samples[:20]}
    assert head == {"chat", "writing", "math", "code", "multiturn"}  # any prefix is a mix
    assert not keys & heldout_keys()
    multiturn = [s for s in samples if s.category == "multiturn"]
    assert all([m["role"] for m in s.messages if m["role"] != "system"] == ["user", "assistant", "user"]
               for s in multiturn)
    assert any(s.messages and s.messages[0]["role"] == "system" for s in samples)


def test_heldout_split_has_the_required_counts_and_is_out_of_every_training_file():
    held = load_prompts(HELDOUT_FILE)
    counts = {c: sum(s.category == c for s in held) for c in ("chat", "code", "math")}
    assert counts["chat"] >= 60 and counts["code"] >= 60 and counts["math"] >= 30, counts
    assert len(heldout_keys()) == len(held)
    for name in ("corpus.jsonl", "corpus_vision.jsonl", "demo.jsonl", "demo_vision.jsonl"):
        assert not {prompt_key(s) for s in load_prompts(CORPUS / name)} & heldout_keys(), name


def test_no_heldout_prompt_is_a_slot_variant_of_a_training_template(monkeypatch):
    templates = load_training_generator(monkeypatch).training_templates()
    # A template's slots match anything; a training prompt may carry one appended constraint.
    patterns = [re.compile("(?:.+)".join(map(re.escape, re.split(r"\{\w+\}", t))) + r"(?: .*)?", re.S)
                for t in templates]
    assert patterns[0].fullmatch(templates[0].format_map(defaultdict(lambda: "anything")) + " Be brief.")
    for sample in load_prompts(HELDOUT_FILE):
        assert not any(p.fullmatch(sample.prompt) for p in patterns), sample.prompt


def test_vision_corpus_has_image_prompts_on_shipped_images():
    samples = load_prompts(CORPUS / "corpus_vision.jsonl")  # also checks that every image opens
    images = [s for s in samples if s.images]
    assert len(images) >= 300 and all(s.category == "image" for s in images)
    assert len({prompt_key(s) for s in images}) == len(images)
    assert any(len(s.images) == 2 for s in images) and any(s.prompt for s in images)
    assert any(s.messages for s in images)
