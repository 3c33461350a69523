"""The stand-in model docs/tutorial.md runs against: a scripted OpenAI-compatible server on 127.0.0.1.

The tutorial's python blocks are executed by tests/test_docs.py, offline, and run from any
folder with the package installed: this module and its tickets ship with it. The first block
starts this server; every later block talks to it through the real `openai_compatible`
adapter and the openai SDK, exactly as it would talk to vLLM or llama.cpp. The stand-in
behaves like a small model that knows the routing task but not its house rules:

- it answers a ticket with a sentence ("This ticket is for the billing team.") until
  the skill asks for the label only;
- it sends password and login tickets to ``tech`` until the skill says they belong to
  ``account``, and then sends *every* ticket that mentions a password or logging in to
  ``account`` (the rule taken literally: wrong for a billing ticket about a
  password-protected receipt in the test set);
- asked for a rule, it proposes the one that fixes what went wrong, sometimes with the
  playbook's heading copied after it (cleaned off by `LLMAgent`), and for a few tickets
  a reply cut off by the per-call limit (refused, and counted);
- asked for a rewrite (``proposal="rewrite"``), it returns the whole new instructions.

It knows the tickets of `TICKETS_FILE` (the tutorial's tasks, 16) and `TEST_TICKETS_FILE` (its
test set, 12), the package's ``agentdescent/testing/data/``, and reads both files, as the
tutorial and examples/ticket_routing.py do. Every reply reports ``usage`` (``ceil(chars / 4)`` each way), as a real server does.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from agentdescent.testing.llmserver import LLMServer, Reply, openai_body

__all__ = ["TEST_TICKETS", "TEST_TICKETS_FILE", "TICKETS", "TICKETS_FILE", "read_tickets", "start_stand_in"]

#: The tutorial's 16 tickets, one ``{"ticket": ..., "label": ...}`` object a line (shipped with the package).
TICKETS_FILE = Path(__file__).resolve().parent / "data" / "tickets.jsonl"
#: Its test set: 12 more tickets, never a run's task.
TEST_TICKETS_FILE = Path(__file__).resolve().parent / "data" / "tickets_test.jsonl"


def read_tickets(path: Path) -> tuple[tuple[str, str], ...]:
    """(ticket, label) pairs from a JSON-lines file of ``{"ticket": ..., "label": ...}`` objects."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return tuple((row["ticket"], row["label"]) for row in map(json.loads, filter(str.strip, lines)))


#: (ticket, label): the tutorial's task set (`TICKETS_FILE`, which the tutorial reads too).
TICKETS = read_tickets(TICKETS_FILE)
#: (ticket, label): the tutorial's test set (`TEST_TICKETS_FILE`), never a run task.
TEST_TICKETS = read_tickets(TEST_TICKETS_FILE)
_GOLD = dict(TICKETS + TEST_TICKETS)

FORMAT_RULE = "Reply with the label only: billing, tech or account."
LOGIN_RULE = "Password and login problems go to account."
_LOGIN_WORDS = ("password", "log in")


def _label(ticket: str, skill: str) -> str:
    if any(w in ticket.lower() for w in _LOGIN_WORDS):
        # the small model's blind spot, and then the rule taken literally: every ticket that
        # mentions a password or logging in goes to account once the skill says so
        return "account" if "password" in skill.lower() else "tech"
    return _GOLD[ticket]


def _answer(ticket: str, skill: str) -> str:
    label = _label(ticket, skill)
    return label if "label only" in skill.lower() else f"This ticket is for the {label} team."


def _ticket_in(text: str) -> str | None:
    return next((t for t in _GOLD if t in text), None)


def _reply(messages: list[dict[str, Any]]) -> tuple[str, str]:
    user = messages[-1]["content"]
    if "Current playbook:" in user or "Current instructions:" in user:  # a propose call
        ticket = _ticket_in(user)
        answered = user.split("The assistant's answer:", 1)[1]
        wrong_label = _LOGIN_WORDS[0] in (ticket or "").lower() or _LOGIN_WORDS[1] in (ticket or "").lower()
        fix = FORMAT_RULE if "team." in answered else LOGIN_RULE if wrong_label else None
        if "Current instructions:" in user:  # rewrite mode: the whole new text
            current = user.split("Current instructions:\n", 1)[1].split("\n\nTask:", 1)[0]
            if fix is None or fix in current:
                return "NONE", "stop"
            return (current + " " + fix).strip(), "stop"
        if fix is None:
            return "NONE", "stop"
        if ticket is not None and (ticket, _GOLD[ticket]) in TICKETS \
                and TICKETS.index((ticket, _GOLD[ticket])) % 5 == 4:
            return "Always reply with the", "length"  # cut off by the per-call limit
        return f"{fix}\n\n# Playbook", "stop"
    system = " ".join(m["content"] for m in messages if m["role"] == "system")
    ticket = _ticket_in(user)
    if ticket is None:
        return "I can only route support tickets.", "stop"
    skill = system + (user.split(ticket, 1)[0] if ticket in user else "")
    return _answer(ticket, skill), "stop"


def _respond(path: str, body: dict[str, Any]) -> Reply:
    text, finish = _reply(body["messages"])
    prompt = math.ceil(sum(len(m["content"] or "") for m in body["messages"]) / 4)
    return Reply(200, openai_body(text, prompt_tokens=prompt, completion_tokens=math.ceil(len(text) / 4),
                                  model=body.get("model", "stand-in"), finish_reason=finish), {}, 0.0)


def start_stand_in() -> LLMServer:
    """Start the stand-in model; ``server.openai_base_url`` is its base URL, ``server.close()`` stops it."""
    return LLMServer(responder=_respond)
