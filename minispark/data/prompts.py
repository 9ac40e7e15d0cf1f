"""Prompt files: load and validate a JSONL prompt corpus before any expensive work starts.

One sample per line, either a bare prompt with optional images::

    {"prompt": "Describe the picture.", "images": ["images/shapes.png"]}

or chat messages in the Qwen-VL format (content is a string or a list of text/image parts)::

    {"messages": [{"role": "user", "content": [{"type": "image", "image": "images/a.png"},
                                               {"type": "text", "text": "What is this?"}]}]}

Optional metadata keys ``id`` and ``category`` are allowed on either form. Image paths resolve
relative to the prompt file. The whole file is validated first; the first problem raises a
:class:`PromptFileError` whose message is ``FILE:LINE: reason``. A trailing assistant message is
kept apart as ``answer``: regeneration replaces it by the target's own answer, a teacher-forced
cache (``minispark cache --source text``) trains on it.

    python -m minispark.data.prompts examples/prompts/demo.jsonl
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minispark.core import checks, model_files
from minispark.core.defaults import HELDOUT_FILE, IMAGE_MIN_PIXELS, MAX_INT
from minispark.core.errors import DuplicateKey, MinisparkError, option, unique_keys

if TYPE_CHECKING:
    from minispark.target.loading import Target
    from minispark.target.session import PromptInputs

SAMPLE_KEYS = {"prompt", "images", "messages", "id", "category"}
MESSAGE_KEYS = {"role", "content"}
ROLES = {"system", "user", "assistant"}
TEXT_PART_KEYS = {"type", "text"}
# Qwen-VL image parts may carry resize hints; they are passed through to the processor untouched.
IMAGE_PART_KEYS = {"type", "image", "min_pixels", "max_pixels", "resized_height", "resized_width"}


class PromptFileError(MinisparkError):
    """A problem in a prompt file; the message is ``FILE:LINE: reason`` (1-based), or ``FILE: reason``
    for the file as a whole (``line`` None)."""

    def __init__(self, path: Path | str, line: int | None, reason: str) -> None:
        super().__init__(f"{path}:{line}: {reason}" if line is not None else f"{path}: {reason}")
        self.path = Path(path)
        self.line = line
        self.reason = reason


@dataclass(frozen=True)
class PromptSample:
    """One validated prompt. Exactly one of ``messages`` / ``prompt`` is set.

    ``images`` lists every image of the sample, resolved to absolute paths, in prompt order; in
    ``messages`` the image parts already carry those absolute paths. ``answer`` is the text of a
    trailing assistant message (not part of ``messages``), if the line had one.
    """

    line: int
    prompt: str | None = None
    messages: tuple[dict[str, Any], ...] | None = None
    images: tuple[Path, ...] = ()
    id: str | None = None
    category: str | None = None
    answer: str | None = None

    def encode_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``Target.encode`` (messages, or prompt + images)."""
        if self.messages is not None:
            return {"messages": copy.deepcopy(list(self.messages))}
        return {"prompt": self.prompt, "images": list(self.images)}


def load_prompts(path: Path | str, *, check_images: bool = True) -> list[PromptSample]:
    """Parse and validate the whole prompt file; raise :class:`PromptFileError` on the first problem."""
    path = Path(path)
    samples = []
    text = _read_text(path)
    if text.lstrip("\ufeff \t\r\n").startswith("["):  # "expected a JSON object, got list" or "malformed JSON"
        first = next(n for n, line in enumerate(text.split("\n"), start=1) if line.strip())
        raise PromptFileError(path, first, "a JSON array, not JSON Lines: write one object per line "
                                           "({\"prompt\": ...}), e.g. `jq -c '.[]' FILE`")
    # Lines end at "\n" only, as editors count them (str.splitlines would also split at U+2028 inside a string).
    for number, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        samples.append(_parse_line(path, number, raw, check_images))
    if not samples:
        raise PromptFileError(path, None, "no prompts in file")
    return samples


def _read_text(path: Path) -> str:
    """The prompt file as text (UTF-8, a leading BOM allowed); bytes that are not UTF-8 are reported at
    their 1-based line and column."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise PromptFileError(path, None, f"cannot read prompt file ({exc.strerror or exc})") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line_start = data.rfind(b"\n", 0, exc.start) + 1
        column = len(data[line_start:exc.start].decode("utf-8", errors="replace")) + 1
        raise PromptFileError(path, data.count(b"\n", 0, exc.start) + 1,
                              f"not UTF-8 text (byte 0x{data[exc.start]:02x} at column {column}); "
                              "save the file as UTF-8") from None


def prompt_file_hash(path: Path | str, samples: Sequence[PromptSample] | None = None) -> str:
    """sha256 over the prompt file's bytes and the bytes of every image it references, in order.

    Moving the file together with its images keeps the hash; editing either changes it.
    """
    path = Path(path)
    samples = load_prompts(path) if samples is None else samples
    digest = hashlib.sha256(path.read_bytes())
    for sample in samples:
        for image in sample.images:
            digest.update(hashlib.sha256(image.read_bytes()).digest())
    return "sha256:" + digest.hexdigest()


def prompt_key(sample: PromptSample) -> str:
    """sha256 identity of a prompt: its system and user text, case- and whitespace-normalized, plus image names.

    Assistant turns, ids and categories do not count, and a bare prompt equals the same text sent
    as one user message, so the key says "the same question" across both line forms. Images count
    by file name only, so a moved corpus keeps its keys.
    """
    if sample.messages is None:
        texts = [sample.prompt or ""]
    else:
        texts = []
        for message in sample.messages:
            if message["role"] == "assistant":
                continue
            content = message["content"]
            if isinstance(content, str):
                texts.append(content)
            else:
                texts.append(" ".join(part["text"] for part in content if part["type"] == "text"))
    normalized = "\n".join(" ".join(text.casefold().split()) for text in texts if text.strip())
    names = "\n".join(image.name for image in sample.images)
    return hashlib.sha256(f"{normalized}\0{names}".encode()).hexdigest()


@functools.cache
def heldout_keys() -> frozenset[str]:
    """The :func:`prompt_key` of every prompt in :data:`HELDOUT_FILE` (read once per process)."""
    return frozenset(prompt_key(sample) for sample in load_prompts(HELDOUT_FILE, check_images=False))


def refuse_heldout(path: Path | str, samples: Sequence[PromptSample]) -> None:
    """Raise on the first line of ``samples`` whose prompt is in the held-out split: never train on one."""
    held = heldout_keys()
    for sample in samples:
        if prompt_key(sample) in held:
            raise PromptFileError(path, sample.line, f"this prompt is in the held-out split ({HELDOUT_FILE.name}): "
                                  f"never train on it (an evaluation set takes {option('split')} heldout)")


def _parse_line(path: Path, number: int, raw: str, check_images: bool) -> PromptSample:
    def fail(reason: str) -> PromptFileError:
        return PromptFileError(path, number, reason)

    if raw.startswith("\ufeff"):  # json's own words: "Unexpected UTF-8 BOM (decode using utf-8-sig)"
        raise fail("starts with a byte-order mark (U+FEFF; files joined together?): only a file's start may hold one")
    try:
        record = json.loads(raw, object_pairs_hook=unique_keys)
    except json.JSONDecodeError as exc:  # "Unterminated string starting at": one "at"
        raise fail(f"malformed JSON: {exc.msg.removesuffix(' at')} at column {exc.colno}") from None
    except DuplicateKey as exc:
        raise fail(f"key {exc.args[0]!r} given twice (JSON would silently keep the last one)") from None
    except RecursionError:
        raise fail("malformed JSON: nested too deeply") from None
    except ValueError as exc:  # an integer of more than 4300 digits: Python refuses to convert it
        raise fail(f"malformed JSON: a number too long to read ({str(exc).partition(':')[0]})") from None
    if not isinstance(record, dict):
        raise fail(f"expected a JSON object, got {type(record).__name__}")
    text = json.dumps(record, ensure_ascii=False)
    index = checks.lone_surrogate(text)
    if index is not None:  # no tokenizer encodes it (a TypeError deep in transformers)
        raise fail(f"holds {text[index]!r}, a \\u escape of half a character (a lone surrogate), "
                   "which is not text")
    unknown = sorted(set(record) - SAMPLE_KEYS)
    if unknown:
        raise fail(f"unknown key {unknown[0]!r} (allowed: {', '.join(sorted(SAMPLE_KEYS))})")
    for key in ("id", "category"):
        if key in record and not isinstance(record[key], str):
            raise fail(f"{key!r} must be a string")
    meta = {"id": record.get("id"), "category": record.get("category")}

    def image(value: Any) -> Path:
        return _resolve_image(path, value, check_images, fail)

    if ("prompt" in record) == ("messages" in record):
        raise fail("each line needs exactly one of 'prompt' or 'messages'")
    if "prompt" in record:
        prompt = record["prompt"]
        if not isinstance(prompt, str) or not prompt.strip():
            raise fail("'prompt' must be a non-empty string")
        images = record.get("images", [])
        if not isinstance(images, list):
            raise fail("'images' must be a list of paths")
        return PromptSample(number, prompt=prompt, images=tuple(image(v) for v in images), **meta)

    if "images" in record:
        raise fail("'images' goes with 'prompt'; put images inside 'messages' content instead")
    messages, images = _parse_messages(record["messages"], image, fail)
    answer = None
    if messages[-1]["role"] == "assistant":
        # Regeneration replaces this reference answer by the target's own; a teacher-forced cache
        # (``minispark cache --source text``) trains on it as it is.
        answer = messages.pop()["content"]
        if not isinstance(answer, str) or not answer.strip():
            raise fail("the trailing assistant message must be non-empty text")
    return PromptSample(number, messages=tuple(messages), images=tuple(images), answer=answer, **meta)


def _parse_messages(value: Any, image, fail) -> tuple[list[dict], list[Path]]:
    if not isinstance(value, list) or not value:
        raise fail("'messages' must be a non-empty list")
    messages, images = [], []
    for i, message in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise fail(f"{where} must be an object")
        unknown = sorted(set(message) - MESSAGE_KEYS)
        if unknown:
            raise fail(f"{where}: unknown key {unknown[0]!r}")
        if message.get("role") not in ROLES:
            raise fail(f"{where}: role must be one of {', '.join(sorted(ROLES))}")
        content = message.get("content")
        if message["role"] == "user" and _blank_text(content):  # as an empty 'prompt' is refused
            raise fail(f"{where}: a user message with no text or image")
        if isinstance(content, str):
            messages.append({"role": message["role"], "content": content})
            continue
        if not isinstance(content, list) or not content:
            raise fail(f"{where}: content must be a string or a non-empty list of parts")
        parts = []
        for j, part in enumerate(content):
            part_where = f"{where}.content[{j}]"
            if not isinstance(part, dict):
                raise fail(f"{part_where} must be an object")
            kind = part.get("type", "image" if "image" in part else None)
            allowed = TEXT_PART_KEYS if kind == "text" else IMAGE_PART_KEYS if kind == "image" else None
            if allowed is None:
                raise fail(f"{part_where}: type must be 'text' or 'image'")
            unknown = sorted(set(part) - allowed)
            if unknown:
                raise fail(f"{part_where}: unknown key {unknown[0]!r}")
            if kind == "text":
                if not isinstance(part.get("text"), str):
                    raise fail(f"{part_where}: 'text' must be a string")
                parts.append({"type": "text", "text": part["text"]})
            else:
                _check_image_sizes(part, part_where, fail)
                resolved = image(part.get("image"))
                images.append(resolved)
                parts.append({**part, "type": "image", "image": str(resolved)})
        if all(part["type"] == "text" for part in parts):
            # text-only parts become one string: text models' chat templates expect string content
            messages.append({"role": message["role"], "content": "".join(part["text"] for part in parts)})
        else:
            messages.append({"role": message["role"], "content": parts})
    if not any(m["role"] == "user" for m in messages):
        raise fail("'messages' needs at least one user message")
    return messages, images


def _blank_text(content: Any) -> bool:
    """Content that is only whitespace text: a blank string, or text parts (and no image) that are blank."""
    if isinstance(content, str):
        return not content.strip()
    return (isinstance(content, list) and bool(content) and all(isinstance(p, dict) and p.get("type") == "text"
                                                                 and isinstance(p.get("text"), str) for p in content)
            and not "".join(p["text"] for p in content).strip())


def _check_image_sizes(part: dict, where: str, fail) -> None:
    """An image part's size keys as qwen-vl-utils can use them: whole pixel counts in [IMAGE_MIN_PIXELS, MAX_INT]
    with min_pixels <= max_pixels, and resized_height with resized_width (it ignores one alone), each at least 28
    (one patch). Each was a traceback (AssertionError, TypeError, ZeroDivisionError) once a target encoded it."""
    lowest = {"min_pixels": IMAGE_MIN_PIXELS, "max_pixels": IMAGE_MIN_PIXELS, "resized_height": 28,
              "resized_width": 28}
    for key, low in lowest.items():
        value = part.get(key)
        if key in part and (isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_INT):
            raise fail(f"{where}: {key!r} must be a whole number in [{low}, {MAX_INT}], got {value!r}")
    if part.get("min_pixels", 0) > part.get("max_pixels", MAX_INT):
        raise fail(f"{where}: 'min_pixels' {part['min_pixels']} is above 'max_pixels' {part['max_pixels']}")
    if ("resized_height" in part) != ("resized_width" in part):
        raise fail(f"{where}: 'resized_height' and 'resized_width' go together (one alone is ignored)")


def _resolve_image(path: Path, value: Any, check: bool, fail) -> Path:
    if not isinstance(value, str) or not value:
        raise fail("an image must be a non-empty path string")
    if value.startswith(("http://", "https://")):
        raise fail(f"remote image {value!r}: images must be local files (nothing is downloaded)")
    if value.startswith("file://"):
        value = value[len("file://") :]
    resolved = (path.parent / value).resolve()
    if check:
        try:  # the --image check: header first, so a decompression bomb is refused before it decodes
            # 'image X: not a file', or where a relative path led: 'image 'cat.png' is /data/cat.png: ...'
            model_files.image(resolved, flag="image" if str(resolved) == value else f"image {value!r} is")
        except MinisparkError as exc:
            raise fail(str(exc)) from None
    return resolved


def main(argv: Sequence[str]) -> int:
    for name in argv:
        try:
            samples = load_prompts(name)
        except PromptFileError as exc:
            print(exc, file=sys.stderr)
            return 1
        n_images = sum(len(s.images) for s in samples)
        print(f"{name}: {len(samples)} prompts, {n_images} images, {prompt_file_hash(name, samples)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))


def load_prompt_inputs(target: Target, path: Path | str, limit: int, *, held_out: bool = True) -> list[PromptInputs]:
    """Encode up to ``limit`` prompts of a prompt file for evaluation.

    ``held_out`` takes them from the end of the file: caches and training read it from the start,
    so the tail is the natural held-out split for a corpus used for both.
    """
    samples = usable_samples(target, load_prompts(path), path)
    picked = samples[-limit:] if held_out else samples[:limit]
    return [encode_within_context(target, sample, path) for sample in picked]


def usable_samples(target: Target, samples: Sequence[PromptSample], path: Path | str) -> list[PromptSample]:
    """``samples`` a text-only ``target`` can be given: its image prompts are left out with one warning
    line (a CLI ``notice:``) saying how many and why, never silently (bench, calibrate)."""
    if target.is_vlm:
        return list(samples)
    kept = [s for s in samples if not s.images]
    if len(kept) < len(samples):
        skipped = len(samples) - len(kept)
        warnings.warn(f"--prompts {path}: skipping {skipped} image prompt{'s' if skipped > 1 else ''}: target "
                      f"{target.name} is text-only", stacklevel=2)
    return kept


def encode_within_context(target: Target, sample: PromptSample, path: Path | str) -> PromptInputs:
    """``sample`` encoded for ``target``; a prompt that alone fills the target's context is refused
    (naming its file and line) rather than decoded into garbage for minutes."""
    inputs = target.encode(**sample.encode_kwargs())
    limit = target.context_limit
    if limit is not None and inputs.length >= limit:
        raise PromptFileError(path, sample.line, f"{inputs.length} tokens fill {target.name}'s context of "
                              f"{limit} positions; shorten this prompt")
    return inputs
