"""Prompts for a target without a chat template (a base model): plain text instead of a conversation template.

A lone prompt (``generate --prompt``, a prompt file's ``prompt`` line) is the text as it is, the completion a
base model is made for. A conversation (``chat``, serve's chat completions, a prompt file's ``messages``) is a
plain transcript, each turn on its own paragraph and the reply's turn left open::

    System: You are terse.

    User: Name a colour.

    Assistant:

The model then continues past its reply into the next ``User:`` turn on its own, so a conversation stops at
:data:`TURN_STOP`. Images need the template's image tokens: a plain prompt takes text only.

    .venv/bin/python -m pytest -q tests/target/test_plain_prompts.py
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from minispark.core.errors import MinisparkError

#: The speaker of each role in a transcript.
SPEAKERS = {"system": "System", "user": "User", "assistant": "Assistant"}
#: Where a reply in a transcript ends: the model starting the user's next turn.
TURN_STOP = "\nUser:"


def message_text(message: dict[str, Any], target_name: str) -> str:
    """The text of one chat message (a string, or a list of text items); an image item is refused."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    parts = []
    for item in content or ():
        if isinstance(item, dict) and item.get("type") == "image":
            raise MinisparkError(f"target {target_name} has no chat template: its prompts are plain text, "
                                 "without images")
        parts.append(str(item.get("text", "")) if isinstance(item, dict) else str(item))
    return "".join(parts)


def transcript(messages: Sequence[dict[str, Any]], target_name: str, add_generation_prompt: bool = True) -> str:
    """The conversation as a plain transcript (see the module docstring)."""
    turns = []
    for message in messages:
        role = message.get("role")
        if role not in SPEAKERS:
            raise MinisparkError(f"target {target_name} has no chat template, and a transcript has no speaker for "
                                 f"role {role!r} (roles: {', '.join(SPEAKERS)})")
        turns.append(f"{SPEAKERS[role]}: {message_text(message, target_name)}")
    if add_generation_prompt:
        turns.append(f"{SPEAKERS['assistant']}:")
    return "\n\n".join(turns)


def turn_stops(stops: Sequence[str], transcript: bool) -> list[str]:
    """A reply's stop strings: ``stops``, and :data:`TURN_STOP` where the prompt is a ``transcript``."""
    return [*stops, TURN_STOP] if transcript else list(stops)


def reply_text(text: str) -> str:
    """A transcript reply without the next turn's marker it stopped at (and the blank line before it)."""
    if text.endswith(TURN_STOP):
        text = text[: -len(TURN_STOP)]
    return text.rstrip("\n")
