"""LLMAgent(conversation=True): one compacting conversation per worker for proposals."""

from __future__ import annotations

import pytest

from agentdescent import LLMAgent, evolve
from agentdescent.agents.llm import current_worker, worker_scope
from agentdescent.testing import FakeProvider
from examples import skill_evolution


def test_worker_scope_is_per_thread_and_nests() -> None:
    assert current_worker() is None
    with worker_scope(3):
        assert current_worker() == 3
        with worker_scope(5):
            assert current_worker() == 5
        assert current_worker() == 3
    assert current_worker() is None


def test_each_worker_keeps_its_own_conversation_across_rounds() -> None:
    tasks = skill_evolution.make_tasks()
    model = skill_evolution.simulated_reply(tasks)
    provider = FakeProvider(lambda messages, **options: model(messages))
    agent = LLMAgent(provider, conversation=True, context_max_tokens=600)
    result = evolve(tasks, skill_evolution.reward, agent=agent, rounds=5, n_workers=3,
                    held_out_frac=0.5, self_verify=False)
    assert result.error is None
    assert set(agent.conversations) <= {0, 1, 2, None}
    used = {k: cm for k, cm in agent.conversations.items() if k is not None and cm.messages}
    assert used, "workers that proposed must have a conversation"
    for cm in used.values():
        roles = [m["role"] for m in cm.messages]
        assert roles[0::2] == ["user"] * len(roles[0::2])      # user, assistant, user, ...
        assert roles[1::2] == ["assistant"] * len(roles[1::2])
    # propose requests after the first in a conversation carry the earlier turns
    propose_requests = [r for r in provider.requests if "playbook" in r["messages"][-1]["content"].lower()]
    assert any(len(r["messages"]) > 1 for r in propose_requests)


def test_long_conversations_compact() -> None:
    provider = FakeProvider(lambda messages, **options: "NONE" if "playbook" in messages[-1]["content"].lower()
                            else "Summary: earlier proposals covered years and numbers.")
    agent = LLMAgent(provider, conversation=True, context_max_tokens=400)
    task = skill_evolution.make_tasks()[0]
    with worker_scope(0):
        for _ in range(30):
            assert agent.propose("# Playbook\n- rule " + "x" * 40, task, "a sentence", 0.0) is None
    cm = agent.conversations[0]
    assert len(cm.messages) == 60             # the history keeps everything
    assert cm.compactions > 0                 # the view was compacted
    assert len(cm.get_messages_for_request()) < 60


def test_bad_context_options_fail_fast() -> None:
    provider = FakeProvider(lambda messages, **options: "ok")
    with pytest.raises((TypeError, ValueError)):
        LLMAgent(provider, conversation=True, context_options={"no_such_knob": 1})
    with pytest.raises(ValueError, match="context_max_tokens"):
        LLMAgent(provider, conversation=True, context_max_tokens=10)
