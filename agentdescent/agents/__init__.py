"""Agents: `LLMAgent` (an `Agent` built on a `Provider`), `CommandAgent`, and the parsing of replies.

Owns the agent's calls and per-worker conversations (`llm`), command-line programs
as models (`command`: `CommandProvider` runs one, `CommandAgent` is an `LLMAgent` over it) and
the one reply parser (`proposals`: a reply becomes a rule, a rewrite, code edits, or `None` with
its refusal kind), the templates and the text that fills them (`templates`), and the on-disk
cache of model calls (`callcache`).
Imports the ground floor and `context` (a conversation is compacted there); it must not import
the engine, the merge, the ledger, the providers or the command line: a provider reaches an
agent as an object through the `Provider` seam.
"""

from .callcache import CallCache, active_call_cache, as_call_cache, call_cache_scope
from .command import CommandAgent, CommandProvider
from .llm import (
    DEFAULT_EDIT_TEMPLATE,
    DEFAULT_PROPOSE_TEMPLATE,
    DEFAULT_REWRITE_TEMPLATE,
    DEFAULT_SOLVE_TEMPLATE,
    REFUSAL_KINDS,
    TRUNCATED_FINISH_REASONS,
    Agent,
    Completion,
    LLMAgent,
    ParsedProposal,
    Provider,
    Usage,
    current_worker,
    estimate_tokens,
    feedback_paragraph,
    is_blank_artifact,
    parse_proposal,
    thread_tokens,
    usage_phase,
    worker_scope,
)

__all__ = [
    "active_call_cache",
    "Agent",
    "as_call_cache",
    "CallCache",
    "call_cache_scope",
    "CommandAgent",
    "CommandProvider",
    "Completion",
    "current_worker",
    "DEFAULT_EDIT_TEMPLATE",
    "DEFAULT_PROPOSE_TEMPLATE",
    "DEFAULT_REWRITE_TEMPLATE",
    "DEFAULT_SOLVE_TEMPLATE",
    "estimate_tokens",
    "feedback_paragraph",
    "is_blank_artifact",
    "LLMAgent",
    "parse_proposal",
    "ParsedProposal",
    "Provider",
    "REFUSAL_KINDS",
    "thread_tokens",
    "TRUNCATED_FINISH_REASONS",
    "Usage",
    "usage_phase",
    "worker_scope",
]
