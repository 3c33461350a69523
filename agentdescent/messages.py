"""OpenAI-style chat messages: their shape, their text, and how they read in a transcript.

This module owns what the package assumes of a message (a mapping with a ``role`` and a
``content``; tool calls on assistant messages with ids, tool results naming the call they
answer), the checks that enforce it at a boundary (`check_messages` for a provider call,
`validate_message` for a conversation), and the plain-text views the token estimate, the
offline providers and the summarizer read (`message_text`, `messages_to_prompt`,
`render_for_transcript`). It must not import anything of the package but the errors.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .errors import InvalidArgument, InvalidArgumentType

__all__ = [
    "ROLES",
    "check_messages",
    "call_ids",
    "clone",
    "content_text",
    "is_tool_call_message",
    "message_text",
    "messages_to_prompt",
    "render_for_transcript",
    "unanswered_calls",
    "validate_message",
]

#: The roles a message may have.
ROLES = ("system", "developer", "user", "assistant", "tool")


def message_text(message: Mapping[str, Any]) -> str:
    """Flatten a message's payload (content, tool calls, tool call id) into one string."""
    parts: list[str] = []
    content = message.get("content")
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, Sequence):
        for part in content:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            else:
                parts.append(json.dumps(part, sort_keys=True, default=str))
    elif content is not None:
        parts.append(str(content))
    for call in message.get("tool_calls") or ():
        fn = call.get("function", {}) if isinstance(call, Mapping) else {}
        parts.append(str(call.get("id", "")) if isinstance(call, Mapping) else "")
        parts.append(str(fn.get("name", "")))
        args = fn.get("arguments", "")
        parts.append(args if isinstance(args, str) else json.dumps(args, sort_keys=True))
    if message.get("tool_call_id"):
        parts.append(str(message["tool_call_id"]))
    if message.get("name"):
        parts.append(str(message["name"]))
    return "\n".join(parts)



def content_text(content: Any) -> str:
    """The text of a message's content: a string, or the text parts of a block list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Iterable) and not isinstance(content, (bytes, Mapping)):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, Mapping) and isinstance(block.get("text"), str):
                parts.append(block["text"])
        return "\n".join(parts)
    return str(content)


def messages_to_prompt(messages: Sequence[Mapping[str, Any]]) -> str:
    """Join the messages' contents into one prompt string (blank line between messages).

    Used by `from_callable` and by the offline token estimate.
    """
    return "\n\n".join(t for t in (content_text(m.get("content")) for m in messages) if t)


def check_messages(messages: Any, owner: str) -> list[dict[str, Any]]:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise InvalidArgumentType(
            f"{owner}.complete() takes a list of message dicts like "
            f"[{{'role': 'user', 'content': '...'}}], got {type(messages).__name__}"
        )
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or "role" not in message:
            raise InvalidArgumentType(
                f"{owner}.complete(): message {i} must be a mapping with 'role' and "
                f"'content', got {message!r:.80}"
            )
        out.append(dict(message))
    if not out:
        raise InvalidArgument(f"{owner}.complete() got an empty message list; send at least one message")
    return out


def is_tool_call_message(message: Mapping[str, Any]) -> bool:
    return message.get("role") == "assistant" and bool(message.get("tool_calls"))


def call_ids(message: Mapping[str, Any]) -> list[str]:
    ids = []
    for call in message.get("tool_calls") or ():
        if isinstance(call, Mapping) and call.get("id") is not None:
            ids.append(str(call["id"]))
    return ids


def unanswered_calls(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """Tool call ids issued in ``messages`` that no later tool message in it answers."""
    open_ids: dict[str, None] = {}
    for message in messages:
        if is_tool_call_message(message):
            for call_id in call_ids(message):
                open_ids[call_id] = None
        elif message.get("role") == "tool":
            open_ids.pop(str(message.get("tool_call_id")), None)
    return list(open_ids)


def validate_message(message: Any) -> dict[str, Any]:
    if not isinstance(message, Mapping):
        raise InvalidArgumentType(
            f"add_message got a {type(message).__name__}; pass an OpenAI-style dict such as "
            "{'role': 'user', 'content': '...'}"
        )
    role = message.get("role")
    if role not in ROLES:
        raise InvalidArgument(f"message role {role!r} is not one of {list(ROLES)}: {dict(message)!r:.200}")
    if role == "tool" and message.get("tool_call_id") is None:
        raise InvalidArgument(
            "a tool message needs the 'tool_call_id' of the assistant tool call it answers: "
            f"{dict(message)!r:.200}"
        )
    if message.get("tool_calls") and role != "assistant":
        raise InvalidArgument(f"only assistant messages may carry 'tool_calls' (got role {role!r})")
    if is_tool_call_message(message):
        for call in message["tool_calls"]:
            if not isinstance(call, Mapping) or not call.get("id"):
                raise InvalidArgument(
                    f"every tool call needs an 'id' so its result can be paired with it: {call!r:.200}"
                )
    try:
        json.dumps(message)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"a message must be JSON-serialisable ({exc}): {dict(message)!r:.200}") from exc
    return clone(dict(message))


def clone(value: Any) -> Any:
    """A deep copy of JSON-shaped data (dicts, lists, scalars), faster than ``copy.deepcopy``."""
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clone(v) for v in value]
    if isinstance(value, Mapping):
        return {k: clone(v) for k, v in value.items()}
    return value



def render_for_transcript(message: Mapping[str, Any]) -> str:
    role = message.get("role", "?")
    content = message.get("content")
    if isinstance(content, str):
        text = content
    elif content is None:
        text = ""
    else:
        text = json.dumps(content, sort_keys=True, default=str)
    if role == "tool":
        return f"tool result [{message.get('tool_call_id')}]: {text}"
    line = f"{role}: {text}" if text else f"{role}:"
    for call in message.get("tool_calls") or ():
        fn = call.get("function", {}) if isinstance(call, Mapping) else {}
        args = fn.get("arguments", "")
        if not isinstance(args, str):
            args = json.dumps(args, sort_keys=True)
        line += f"\n{role} called {fn.get('name', '?')}({args}) [{call.get('id')}]"
    return line

