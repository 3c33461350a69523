"""Usage (thread-safety), FakeProvider, and LLMAgent over fakes and over a real loopback server."""

from __future__ import annotations

import logging
import threading

import pytest

from agentdescent import Task
from agentdescent.agents.llm import (
    DEFAULT_PROPOSE_TEMPLATE,
    REFUSAL_KINDS,
    Agent,
    Completion,
    LLMAgent,
    Provider,
    Usage,
    estimate_tokens,
    is_blank_artifact,
    parse_proposal,
)
from agentdescent.errors import InvalidArgument
from agentdescent.providers import ProviderUnavailableError, from_callable, openai_compatible
from agentdescent.testing import FakeProvider
from agentdescent.testing.llmserver import LLMServer, openai_body

TASK = Task("t1", "What is the capital of France?", {"answer": "Paris"})
PLAYBOOK = "# Playbook\n- Answer with one word."


def run_threads(n: int, target) -> None:
    errors: list[BaseException] = []

    def wrapped():
        try:
            target()
        except BaseException as exc:  # pragma: no cover - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=wrapped) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


# --------------------------------------------------------------------------- Usage


def test_usage_is_thread_safe():
    usage = Usage()

    def work():
        for _ in range(2000):
            usage.record(3, 2, 1, cache_write_tokens=1)

    run_threads(8, work)
    assert usage.snapshot() == {
        "prompt_tokens": 48_000,
        "completion_tokens": 32_000,
        "cached_tokens": 16_000,
        "cache_write_tokens": 16_000,
        "calls": 16_000,
        "total_tokens": 80_000,
    }


def test_usage_snapshots_are_consistent_under_concurrent_writes():
    usage = Usage()
    stop = threading.Event()
    bad: list[dict] = []

    def writer():
        while not stop.is_set():
            usage.record(1, 1, 1)

    def reader():
        for _ in range(2000):
            s = usage.snapshot()
            if not (s["prompt_tokens"] == s["completion_tokens"] == s["cached_tokens"] == s["calls"]):
                bad.append(s)

    writers = [threading.Thread(target=writer) for _ in range(3)]
    for w in writers:
        w.start()
    try:
        run_threads(2, reader)
    finally:
        stop.set()
        for w in writers:
            w.join()
    assert bad == []


def test_usage_rejects_negative_counts_and_adds_meters():
    usage = Usage()
    with pytest.raises(ValueError, match="negative"):
        usage.record(-1)
    other = Usage()
    other.record(10, 5, 4, cache_write_tokens=2)
    usage.add(other)
    assert usage.snapshot()["cache_write_tokens"] == 2 and usage.total_tokens == 15


def test_estimate_tokens_is_ceil_chars_over_four():
    assert estimate_tokens("") == 0
    assert estimate_tokens("abc") == 1
    assert estimate_tokens("abcd") == 1
    assert estimate_tokens("abcde") == 2


# --------------------------------------------------------------------------- FakeProvider


def test_fake_provider_records_requests_and_meters_with_the_estimate():
    fake = FakeProvider(lambda messages, **options: "Paris")
    assert isinstance(fake, Provider)
    messages = [{"role": "system", "content": "12345678"}, {"role": "user", "content": "abcd"}]
    reply = fake.complete(messages, temperature=0.0, max_tokens=None)
    messages[1]["content"] = "mutated later"

    assert reply.text == "Paris"
    assert fake.requests == [
        {
            "messages": [{"role": "system", "content": "12345678"}, {"role": "user", "content": "abcd"}],
            "options": {"temperature": 0.0},
        }
    ]
    assert reply.usage.snapshot()["prompt_tokens"] == estimate_tokens("12345678\n\nabcd") == 4
    assert reply.usage.completion_tokens == 2
    assert fake.usage.calls == 1 and fake.calls == 1


def test_fake_provider_handler_sees_options_and_can_return_a_completion():
    exact = Usage()
    exact.record(1000, 10, 900)
    seen = []

    def handler(messages, **options):
        seen.append(options)
        return Completion("cached!", exact)

    fake = FakeProvider(handler)
    fake.complete([{"role": "user", "content": "q"}], model="m", tools=[{"x": 1}])
    assert seen == [{"model": "m", "tools": [{"x": 1}]}]
    assert fake.usage.cached_tokens == 900 and fake.usage.prompt_tokens == 1000


def test_fake_provider_validates_like_a_real_provider():
    fake = FakeProvider(lambda messages, **options: 42)
    with pytest.raises(TypeError, match="'top_p'"):
        fake.complete([{"role": "user", "content": "q"}], top_p=0.9)
    with pytest.raises(TypeError, match="returned a int"):
        fake.complete([{"role": "user", "content": "q"}])
    with pytest.raises(TypeError, match="callable"):
        FakeProvider("reply")


def test_fake_provider_handler_errors_propagate():
    def down(messages, **options):
        raise ProviderUnavailableError("simulated outage")

    fake = FakeProvider(down)
    with pytest.raises(ProviderUnavailableError, match="simulated outage"):
        fake.complete([{"role": "user", "content": "q"}])
    assert fake.calls == 1  # the attempt is still recorded


def test_fake_provider_is_thread_safe():
    fake = FakeProvider(lambda messages, **options: messages[-1]["content"].upper())

    def work():
        for i in range(200):
            assert fake.complete([{"role": "user", "content": f"q{i}"}]).text == f"Q{i}"

    run_threads(8, work)
    assert fake.calls == 1600 and fake.usage.calls == 1600


# --------------------------------------------------------------------------- LLMAgent


def test_llm_agent_solve_sends_artifact_as_system_and_task_as_user():
    fake = FakeProvider(lambda messages, **options: "Paris")
    agent = LLMAgent(fake, model="small", call_tokens=32, temperature=0.0)
    assert isinstance(agent, Agent)

    assert agent.solve(PLAYBOOK, TASK) == "Paris"
    request = fake.requests[0]
    assert request["messages"] == [
        {"role": "system", "content": PLAYBOOK},
        {"role": "user", "content": TASK.prompt},
    ]
    assert request["options"] == {"model": "small", "max_tokens": 32, "temperature": 0.0}

    agent.solve("   ", TASK)  # an empty artifact sends no system message
    assert fake.requests[1]["messages"] == [{"role": "user", "content": TASK.prompt}]


def test_llm_agent_propose_returns_one_rule():
    fake = FakeProvider(lambda messages, **options: "  - Rule: Answer with the city name only.\n")
    agent = LLMAgent(fake)
    rule = agent.propose(PLAYBOOK, TASK, "It is Paris, a lovely city.", 0.0)
    assert rule == "Answer with the city name only."
    [message] = fake.requests[0]["messages"]
    assert message["role"] == "user"
    for part in (PLAYBOOK, TASK.prompt, "It is Paris, a lovely city.", "0.00", "NONE"):
        assert part in message["content"]


@pytest.mark.parametrize(
    "reply", ["NONE", "none", "None.", "**NONE**", "`NONE`", "  NONE!  ", "NONE\nThe answer was fine."]
)
def test_llm_agent_none_reply_means_no_change(reply):
    agent = LLMAgent(FakeProvider(lambda messages, **options: reply))
    assert agent.propose(PLAYBOOK, TASK, "Paris", 0.5) is None
    assert agent.declined == 1 and agent.empty_replies == 0


def test_llm_agent_does_not_mistake_a_rule_starting_with_none_for_none():
    agent = LLMAgent(FakeProvider(lambda messages, **options: "None of the answers may exceed one word."))
    assert agent.propose(PLAYBOOK, TASK, "Paris", 0.0) == "None of the answers may exceed one word."


def test_llm_agent_empty_reply_warning_cadence(caplog):
    caplog.set_level(logging.WARNING, logger="agentdescent.agents")
    agent = LLMAgent(FakeProvider(lambda messages, **options: "   "))

    def work():
        for _ in range(30):
            assert agent.propose(PLAYBOOK, TASK, "Paris", 0.0) is None

    run_threads(4, work)  # 120 empty replies from several workers at once
    warnings = [r for r in caplog.records if r.name == "agentdescent.agents"]
    assert agent.empty_replies == 120
    assert len(warnings) == 3  # the 1st, 10th and 100th
    assert [w.args[0] for w in warnings] == [1, 10, 100]
    assert all(w.levelno == logging.WARNING and "call_tokens" in w.getMessage() for w in warnings)


def test_empty_reply_counters_are_per_agent(caplog):
    caplog.set_level(logging.WARNING, logger="agentdescent.agents")
    fake = FakeProvider(lambda messages, **options: "")
    a, b = LLMAgent(fake), LLMAgent(fake)
    a.propose(PLAYBOOK, TASK, "x", 0.0)
    b.propose(PLAYBOOK, TASK, "x", 0.0)
    assert a.empty_replies == b.empty_replies == 1
    assert len(caplog.records) == 2  # each agent's first empty reply is worth a warning


def test_llm_agent_custom_templates():
    fake = FakeProvider(lambda messages, **options: "ok")
    agent = LLMAgent(
        fake,
        solve_template="[{task_id}] {prompt}",
        propose_template="Q: {prompt}\nA: {output}\nscore {reward:.1f}; rule or NONE? {{literal}}",
    )
    agent.solve(PLAYBOOK, TASK)
    agent.propose(PLAYBOOK, TASK, "Lyon", 0.25)
    assert fake.requests[0]["messages"][-1]["content"] == f"[t1] {TASK.prompt}"
    assert fake.requests[1]["messages"][0]["content"] == (
        f"Q: {TASK.prompt}\nA: Lyon\nscore 0.2; rule or NONE? {{literal}}"
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"solve_template": "Answer: {question}"}, r"unknown field \{question\}"),
        ({"solve_template": "no fields at all"}, r"no \{prompt\} field"),
        ({"propose_template": "{prompt} {artifact}"}, r"no \{output\} field"),
        ({"propose_template": "{prompt} {output} {}"}, "positional field"),
        ({"propose_template": "{prompt} {output} {reward:zz}"}, "does not format"),
        ({"solve_template": "{prompt"}, "not a valid str.format template"),
    ],
)
def test_llm_agent_validates_templates_at_construction(kwargs, match):
    fake = FakeProvider(lambda messages, **options: "ok")
    with pytest.raises(ValueError, match=match):
        LLMAgent(fake, **kwargs)
    assert fake.calls == 0


def test_llm_agent_rejects_non_providers():
    with pytest.raises(TypeError, match="from_callable"):
        LLMAgent(lambda prompt: "x")
    with pytest.raises(TypeError, match="str.format template"):
        LLMAgent(FakeProvider(lambda m, **o: "x"), solve_template=3)


def test_default_propose_template_fields_are_valid():
    assert "{output}" in DEFAULT_PROPOSE_TEMPLATE and "{prompt}" in DEFAULT_PROPOSE_TEMPLATE


# --------------------------------------------------------------------------- usage flow


def test_agent_meter_is_the_providers_and_is_not_double_counted():
    fake = FakeProvider(lambda messages, **options: "Paris")
    agent = LLMAgent(fake)
    assert agent.usage is fake.usage
    agent.solve(PLAYBOOK, TASK)
    agent.propose(PLAYBOOK, TASK, "Paris", 0.0)
    assert agent.usage.calls == 2


def test_given_usage_records_every_call_separately():
    run_meter = Usage()
    fake = FakeProvider(lambda messages, **options: "Paris")
    agent = LLMAgent(fake, usage=run_meter)
    agent.solve(PLAYBOOK, TASK)
    agent.propose(PLAYBOOK, TASK, "Paris", 0.0)
    assert agent.usage is run_meter
    assert run_meter.snapshot() == fake.usage.snapshot()
    assert run_meter.calls == 2 and run_meter.total_tokens > 0


def test_provider_without_a_meter_is_estimated():
    class Tiny:
        def complete(self, messages, **options):
            return Completion("Paris")  # reports no usage

    agent = LLMAgent(Tiny())
    agent.solve("", TASK)
    assert agent.usage.calls == 1
    assert agent.usage.prompt_tokens == estimate_tokens(TASK.prompt)
    assert agent.usage.completion_tokens == estimate_tokens("Paris")


def test_llm_agent_over_from_callable():
    provider = from_callable(lambda prompt: "NONE" if "Score" in prompt else "Paris")
    agent = LLMAgent(provider)
    assert agent.solve(PLAYBOOK, TASK) == "Paris"
    assert agent.propose(PLAYBOOK, TASK, "Paris", 1.0) is None
    assert agent.usage is provider.usage and agent.usage.calls == 2


def test_llm_agent_over_a_real_server():
    with LLMServer() as server:
        provider = openai_compatible(
            "test-model", base_url=server.openai_base_url, api_key="sk-local-test", max_retries=0
        )
        agent = LLMAgent(provider, call_tokens=64, temperature=0.0)
        server.push(openai_body("Paris", prompt_tokens=40, completion_tokens=1, cached_tokens=32))
        server.push(openai_body("Name the capital city only.", prompt_tokens=200, completion_tokens=7))

        assert agent.solve(PLAYBOOK, TASK) == "Paris"
        assert agent.propose(PLAYBOOK, TASK, "It might be Paris", 0.0) == "Name the capital city only."

        solve_body, propose_body = (r.body for r in server.requests)
        assert solve_body["messages"][0] == {"role": "system", "content": PLAYBOOK}
        assert solve_body["messages"][1] == {"role": "user", "content": TASK.prompt}
        assert solve_body["max_tokens"] == 64 and solve_body["temperature"] == 0.0
        assert "It might be Paris" in propose_body["messages"][0]["content"]
        assert agent.usage.snapshot() == {
            "prompt_tokens": 240,
            "completion_tokens": 8,
            "cached_tokens": 32,
            "cache_write_tokens": 0,
            "calls": 2,
            "total_tokens": 248,
        }


# --------------------------------------------------------------------------- one rule or None

ARTIFACT = "# Playbook\n- Answer with the year only.\n- Keep answers short."


def agent_replying(text: str, finish_reason: str | None = "stop", **kwargs) -> LLMAgent:
    return LLMAgent(FakeProvider(lambda messages, **options: Completion(text, finish_reason=finish_reason)),
                    **kwargs)


def test_the_reported_reply_becomes_the_rule_without_its_heading():
    agent = agent_replying("Keep the tone logical and respectful.\n\n# Playbook")
    assert agent.propose(PLAYBOOK, TASK, "Paris", 0.0) == "Keep the tone logical and respectful."
    assert agent.stats()["rules"] == 1 and agent.stats()["cleaned"] == 1


@pytest.mark.parametrize(
    ("reply", "rule"),
    [
        ("  - Rule: Answer with the city name only.\n", "Answer with the city name only."),
        ('**New rule:** "Always answer with digits, not words."', "Always answer with digits, not words."),
        ("\u201cAnswer in one word.\u201d", "Answer in one word."),
        ("`Answer in one word.`", "Answer in one word."),
        ("Here is one general rule:\n\nAlways give the bare number.\n\nThis rule helps because the "
         "grader expects numbers.", "Always give the bare number."),
        ("Sure! Here's a rule: When asked for a year, reply with the four digits only. This will help "
         "the assistant.", "When asked for a year, reply with the four digits only."),
        ("```\nAlways reply with one word.\n```", "Always reply with one word."),
        ("1. Use digits.\n2. Be brief.", "Use digits."),
        ("Always state the unit,\nthen the number.", "Always state the unit, then the number."),
        ("## Rule\nName the city only.\n\n---\nExplanation: the grader wants one word.", "Name the city only."),
        # the playbook copied back with one new rule at the end: the new rule is the proposal
        ("# Playbook\n- Answer with the year only.\n- Keep answers short.\n- Give SI units.", "Give SI units."),
        ("None of the answers may exceed one word.", "None of the answers may exceed one word."),
        ("The rule I'd like to share is: \"Name the city only.\"", "Name the city only."),
        ("A good rule would be: answer with digits.", "Answer with digits."),
        ("Rule of thumb: be brief.", "Rule of thumb: be brief."),
        ("The answer should be the bare city name.", "The answer should be the bare city name."),
    ],
)
def test_a_reply_is_cleaned_down_to_one_rule(reply, rule):
    agent = agent_replying(reply)
    assert agent.propose(ARTIFACT, TASK, "Paris", 0.0) == rule


@pytest.mark.parametrize(
    ("reply", "finish_reason", "kind"),
    [
        ("Always answer with the", "length", "truncated"),          # OpenAI-compatible
        ("Always answer with the", "max_tokens", "truncated"),      # Anthropic
        ("   ", "stop", "empty"),
        ("# Playbook", "stop", "not_a_rule"),                        # only the title
        ("# Playbook\n- Answer with the year only.\n- Keep answers short.", "stop", "restated"),
        ("Answer with the year only", "stop", "restated"),           # a rule already there
        ("answer WITH the year only!", "stop", "restated"),          # in other case and punctuation
        ("It is probably Paris, a lovely city.", "stop", "echoed"),  # the output handed back
        ("What is the capital of France?", "stop", "echoed"),        # the task handed back
        ("Paris", "stop", "not_a_rule"),
        ("1989", "stop", "not_a_rule"),
        ("Should the answer be shorter?", "stop", "not_a_rule"),
        ("The assistant's answer is incorrect.", "stop", "not_a_rule"),
        ("The assistant's answer: 3", "stop", "not_a_rule"),
        ("The Assistant's answer to this task would have been: Lyon.", "stop", "not_a_rule"),
        ("Rule: " + "always be careful " * 40, "stop", "too_long"),
        ("NONE", "stop", "declined"),
        ("Rule: NONE", "stop", "declined"),
    ],
)
def test_each_refusal_is_none_and_counted_by_kind(reply, finish_reason, kind):
    agent = agent_replying(reply, finish_reason)
    assert agent.propose(ARTIFACT, TASK, "It is probably Paris, a lovely city.", 0.0) is None
    stats = agent.stats()
    assert stats[kind] == 1 and stats["proposals"] == 1 and stats["rules"] == 0
    assert stats["proposals"] == stats["rules"] + stats["declined"] + stats["refused"]


def test_a_cut_off_reply_is_refused_even_when_it_reads_like_a_rule(caplog):
    caplog.set_level(logging.WARNING, logger="agentdescent.agents")
    agent = agent_replying("Always answer with the bare year.", "length", call_tokens=8)
    assert agent.propose(PLAYBOOK, TASK, "Paris", 0.0) is None
    assert agent.stats()["truncated"] == 1
    [warning] = caplog.records
    assert "cut off by the per-call limit" in warning.getMessage() and "call_tokens=8" in warning.getMessage()


def test_max_proposal_chars_is_the_size_knob():
    rule = "Answer with the bare year and never a sentence."
    assert agent_replying(rule, max_proposal_chars=len(rule)).propose(PLAYBOOK, TASK, "x", 0.0) == rule
    short = agent_replying(rule, max_proposal_chars=len(rule) - 1)
    assert short.propose(PLAYBOOK, TASK, "x", 0.0) is None and short.stats()["too_long"] == 1
    for bad in (0, -5):
        with pytest.raises(ValueError, match="max_proposal_chars"):
            agent_replying(rule, max_proposal_chars=bad)
    with pytest.raises(TypeError, match="max_proposal_chars"):
        agent_replying(rule, max_proposal_chars=10.0)


def test_stats_add_up_over_a_mix_of_replies():
    replies = iter(["Use digits.", "NONE", "", "Use digits.\n\n# Playbook", "Paris"])
    agent = LLMAgent(FakeProvider(lambda messages, **options: next(replies)))
    results = [agent.propose(PLAYBOOK, TASK, "x", 0.0) for _ in range(5)]
    assert results == ["Use digits.", None, None, "Use digits.", None]
    stats = agent.stats()
    assert {k: stats[k] for k in ("proposals", "rules", "declined", "empty", "not_a_rule", "cleaned",
                                  "refused")} == {"proposals": 5, "rules": 2, "declined": 1, "empty": 1,
                                                  "not_a_rule": 1, "cleaned": 1, "refused": 2}
    assert agent.declined == 1 and agent.empty_replies == 1
    assert set(REFUSAL_KINDS) <= set(stats)


def test_parse_proposal_is_usable_on_its_own():
    parsed = parse_proposal("Rule: Name the city.\n\n# Playbook", artifact=PLAYBOOK)
    assert parsed.text == "Name the city." and parsed.kind == "rule" and parsed.cleaned
    assert parse_proposal("x", finish_reason="length").kind == "truncated"
    with pytest.raises(ValueError, match="mode"):
        parse_proposal("x", mode="essay")


# --------------------------------------------------------------------------- rewrite mode


def test_rewrite_mode_returns_the_whole_new_text():
    current = "You are a quiz assistant."
    agent = agent_replying("Here is the improved prompt:\n```text\n# Role\nYou are a quiz assistant. "
                           "Answer with one word.\n```\nThis version is more direct.", proposal="rewrite")
    new = agent.propose(current, TASK, "It is Paris.", 0.0)
    assert new == "# Role\nYou are a quiz assistant. Answer with one word."  # headings stay
    prompt = agent.provider.requests[0]["messages"][0]["content"]
    assert "Current instructions:\nYou are a quiz assistant." in prompt and "complete new" in prompt
    same = agent_replying("You are a quiz assistant.", proposal="rewrite")
    assert same.propose(current, TASK, "x", 0.0) is None and same.stats()["restated"] == 1


def test_rewrite_mode_needs_the_artifact_in_its_template():
    with pytest.raises(ValueError, match=r"no \{artifact\} field"):
        LLMAgent(FakeProvider(lambda m, **o: "x"), proposal="rewrite", propose_template="{prompt} {output}")
    with pytest.raises(ValueError, match="'rule'"):
        LLMAgent(FakeProvider(lambda m, **o: "x"), proposal="rules")


def test_single_slot_prompt_evolves_with_rewrites():
    from agentdescent import SingleSlot, evolve

    tasks = [Task(f"t{i}", f"What is {i} + {i}?", {"answer": str(2 * i)}) for i in range(8)]

    def handler(messages, **options):
        user = messages[-1]["content"]
        if "Current instructions" in user:
            return "You answer arithmetic questions. Reply with the number only."
        system = messages[0]["content"] if messages[0]["role"] == "system" else ""
        task = next(t for t in tasks if t.prompt == user)
        return task.meta["answer"] if "number only" in system else f"The answer is {task.meta['answer']}."

    agent = LLMAgent(FakeProvider(handler), proposal="rewrite")
    result = evolve(tasks, lambda task, out: float(out.strip() == task.meta["answer"]), agent=agent,
                    strategy=SingleSlot("You answer arithmetic questions."), rounds=3, n_workers=2)
    assert result.rendered == "You answer arithmetic questions. Reply with the number only."
    assert result.final_reward == 1.0 and agent.stats()["rules"] >= 1


# --------------------------------------------------------------------------- prompt placement


def test_artifact_in_the_user_message_through_the_solve_template():
    fake = FakeProvider(lambda messages, **options: "Paris")
    agent = LLMAgent(fake, solve_template="{artifact}\n\n{prompt}")
    agent.solve(PLAYBOOK, TASK)
    assert fake.requests[0]["messages"] == [{"role": "user", "content": f"{PLAYBOOK}\n\n{TASK.prompt}"}]
    agent.solve("# Playbook", TASK)  # no rules yet: nothing to show
    assert fake.requests[1]["messages"] == [{"role": "user", "content": TASK.prompt}]


@pytest.mark.parametrize("rendered", ["", "   \n ", "# Playbook", "# Rules\n\n", "## Skill\n# Playbook"])
def test_an_empty_artifact_sends_no_system_message(rendered):
    fake = FakeProvider(lambda messages, **options: "Paris")
    agent = LLMAgent(fake)
    agent.solve(rendered, TASK)
    assert fake.requests[0]["messages"] == [{"role": "user", "content": TASK.prompt}]
    agent.propose(rendered, TASK, "x", 0.0)
    assert "Current playbook:\n(empty)\n" in fake.requests[1]["messages"][0]["content"]
    assert is_blank_artifact(rendered)


def test_a_title_with_rules_is_not_empty():
    assert not is_blank_artifact("# Playbook\n- Answer in one word.")
    assert not is_blank_artifact("#hashtags are text, not headings")
    agent = LLMAgent(FakeProvider(lambda messages, **options: "Paris"))
    assert agent.messages_for_solve(PLAYBOOK, TASK)[0] == {"role": "system", "content": PLAYBOOK}


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(("value", "error"), [(0, ValueError), (-1, ValueError), (True, TypeError),
                                              (1.5, TypeError), ("64", TypeError)])
def test_call_tokens_must_be_a_positive_int_and_says_it_is_per_call(value, error):
    with pytest.raises(error) as info:
        LLMAgent(FakeProvider(lambda m, **o: "x"), call_tokens=value)
    message = str(info.value)
    assert "call_tokens" in message and "per-call cap" in message and "evolve(max_tokens=...)" in message


@pytest.mark.parametrize("value", [64, None])
def test_max_tokens_is_refused_naming_call_tokens_the_per_call_caps_name(value):
    # max_tokens is the run's budget everywhere; on the agent it would silently mean another thing
    with pytest.raises(InvalidArgument) as info:
        LLMAgent(FakeProvider(lambda m, **o: "x"), max_tokens=value)
    message = str(info.value)
    assert "\n" not in message and f"LLMAgent(max_tokens={value!r})" in message
    assert f"LLMAgent(call_tokens={value!r})" in message and "evolve(max_tokens=...)" in message


@pytest.mark.parametrize(("value", "error"), [(-0.1, ValueError), (float("nan"), ValueError),
                                              (float("inf"), ValueError), ("0.2", TypeError), (True, TypeError)])
def test_temperature_must_be_a_number_at_least_zero(value, error):
    with pytest.raises(error, match="temperature"):
        LLMAgent(FakeProvider(lambda m, **o: "x"), temperature=value)


def test_solve_replies_cut_off_are_counted(caplog):
    caplog.set_level(logging.WARNING, logger="agentdescent.agents")
    agent = agent_replying("The Berlin Wall fell in", "length", call_tokens=5)
    assert agent.solve(PLAYBOOK, TASK) == "The Berlin Wall fell in"  # returned as it is
    assert agent.stats()["solves"] == 1 and agent.stats()["solves_truncated"] == 1
    assert "call_tokens=5" in caplog.records[0].getMessage()


def test_a_cut_off_proposal_over_a_real_server_is_refused():
    with LLMServer() as server:
        provider = openai_compatible("test-model", base_url=server.openai_base_url, api_key="local",
                                     max_retries=0)
        agent = LLMAgent(provider, call_tokens=6)
        server.push(openai_body("Always answer with the bare", finish_reason="length", completion_tokens=6))
        server.push(openai_body("Always answer with the bare year.\n\n# Playbook"))
        assert agent.propose(PLAYBOOK, TASK, "It is Paris.", 0.0) is None
        assert agent.propose(PLAYBOOK, TASK, "It is Paris.", 0.0) == "Always answer with the bare year."
        assert server.requests[0].body["max_tokens"] == 6
    assert agent.stats()["truncated"] == 1 and agent.stats()["rules"] == 1


# --------------------------------------------------------------------------- demonstrations as chat turns

from agentdescent.fewshot import render_demonstrations  # noqa: E402
from agentdescent.rewards.builtin import Score  # noqa: E402

DEMOS = [("2 + 2?", "4"), ("Capital of Italy?", "Rome")]
WITH_DEMOS = PLAYBOOK + "\n\n" + render_demonstrations(DEMOS)


def recording_agent(reply: str = "ok", **kwargs) -> tuple[LLMAgent, FakeProvider]:
    fake = FakeProvider(lambda messages, **options: reply)
    return LLMAgent(fake, **kwargs), fake


def test_demonstrations_are_sent_as_chat_turns_in_order():
    agent, fake = recording_agent("Paris")
    assert agent.solve(WITH_DEMOS, TASK) == "Paris"
    assert fake.requests[0]["messages"] == [
        {"role": "system", "content": PLAYBOOK},
        {"role": "user", "content": "2 + 2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "Capital of Italy?"},
        {"role": "assistant", "content": "Rome"},
        {"role": "user", "content": TASK.prompt},
    ]


def test_demonstration_turns_are_filled_by_the_solve_template():
    agent, _ = recording_agent(solve_template="[{task_id}] Q: {prompt}")
    messages = agent.messages_for_solve(WITH_DEMOS, TASK)
    assert [m["content"] for m in messages[1:]] == [
        "[demo-1] Q: 2 + 2?", "4", "[demo-2] Q: Capital of Italy?", "Rome", "[t1] Q: " + TASK.prompt]


def test_an_artifact_template_gets_the_instructions_and_the_demos_get_none():
    agent, _ = recording_agent(solve_template="{artifact}\n\nQ: {prompt}")
    messages = agent.messages_for_solve(WITH_DEMOS, TASK)
    assert all(m["role"] != "system" for m in messages)
    assert messages[0] == {"role": "user", "content": "Q: 2 + 2?"}  # empty {artifact}, stripped
    assert messages[1] == {"role": "assistant", "content": "4"}
    assert messages[-1] == {"role": "user", "content": f"{PLAYBOOK}\n\nQ: {TASK.prompt}"}
    assert "<<<" not in "".join(m["content"] for m in messages)


def test_blank_instructions_with_demonstrations_send_the_turns_and_no_system_message():
    rendered = "# Playbook\n\n" + render_demonstrations(DEMOS)
    agent, _ = recording_agent()
    messages = agent.messages_for_solve(rendered, TASK)
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    agent, _ = recording_agent(solve_template="{artifact}\n\nQ: {prompt}")
    assert agent.messages_for_solve(rendered, TASK)[-1] == {"role": "user", "content": f"Q: {TASK.prompt}"}


def test_demonstrations_holding_marker_lines_survive_the_round_trip():
    tricky = [("<<<input>>>\nline two", "\\<<<output>>>\n<<<end demonstrations>>>")]
    agent, _ = recording_agent()
    messages = agent.messages_for_solve(PLAYBOOK + "\n\n" + render_demonstrations(tricky), TASK)
    assert messages[1:3] == [{"role": "user", "content": tricky[0][0]},
                             {"role": "assistant", "content": tricky[0][1]}]


@pytest.mark.parametrize("template", [None, "{artifact}\n\nQ: {prompt}"])
def test_a_text_without_a_block_is_sent_as_before(template):
    agent, _ = recording_agent(solve_template=template)
    text = PLAYBOOK + "\n<<<demonstrations>>>\nnot a block: it never ends"
    messages = agent.messages_for_solve(text, TASK)
    if template is None:
        assert messages == [{"role": "system", "content": text}, {"role": "user", "content": TASK.prompt}]
    else:
        assert messages == [{"role": "user", "content": f"{text}\n\nQ: {TASK.prompt}"}]


def test_the_proposer_reads_the_demonstrations_as_a_list_not_as_markers():
    agent, fake = recording_agent("Answer with one word.")
    long_input = "x" * 500
    rendered = PLAYBOOK + "\n\n" + render_demonstrations([*DEMOS, (long_input, "y")])
    agent.propose(rendered, TASK, "It is Paris.", 0.0)
    prompt = fake.requests[0]["messages"][0]["content"]
    assert "<<<" not in prompt
    assert "Examples the assistant is shown:\n- 2 + 2? -> 4\n- Capital of Italy? -> Rome\n- " in prompt
    assert long_input not in prompt and "x" * 190 in prompt


def test_a_rule_already_in_the_instructions_is_restated_even_with_demonstrations():
    agent, _ = recording_agent("Answer with one word.")
    assert agent.propose(WITH_DEMOS, TASK, "It is Paris.", 0.0) is None
    assert agent.stats()["restated"] == 1


# --------------------------------------------------------------------------- reflect_on: several failures

OTHER = Task("t2", "Which river flows through Vienna?", {"answer": "Danube"})
THIRD = Task("t3", "What is the largest ocean on Earth?", {"answer": "Pacific"})


def test_reflect_on_one_leaves_the_prompt_byte_identical():
    plain, plain_fake = recording_agent("Name the city only.")
    wide, wide_fake = recording_agent("Name the city only.", reflect_on=1)
    plain.propose(PLAYBOOK, TASK, "It is Paris.", 0.0)
    wide.propose(PLAYBOOK, TASK, "It is Paris.", 0.0, failures=[(OTHER, "The Rhine.", 0.0)])
    assert plain_fake.requests == wide_fake.requests
    expected = DEFAULT_PROPOSE_TEMPLATE.format(
        artifact=PLAYBOOK, prompt=TASK.prompt, output="It is Paris.", reward=0.0, task_id="t1", feedback="",
        feedback_text="", others="")
    assert plain_fake.requests[0]["messages"][0]["content"] == expected


def test_reflect_on_shows_the_other_failures_with_their_feedback():
    agent, fake = recording_agent("Name the place only.", reflect_on=2)
    failures = [(OTHER, "The Rhine.", Score(0.0, "expected 'Danube'")), (THIRD, "Atlantic", 0.0)]
    assert agent.propose(PLAYBOOK, TASK, "It is Paris.", 0.0, failures=failures) == "Name the place only."
    prompt = fake.requests[0]["messages"][0]["content"]
    assert OTHER.prompt in prompt and "The Rhine." in prompt and "expected 'Danube'" in prompt
    assert THIRD.prompt not in prompt  # reflect_on=2: one other failure at most
    assert prompt.index(TASK.prompt) < prompt.index(OTHER.prompt) < prompt.index("Write ONE general rule")


def test_other_failures_are_cut_when_long():
    agent, fake = recording_agent("Name the place only.", reflect_on=3)
    agent.propose(PLAYBOOK, TASK, "Paris", 0.0, failures=[(Task("t9", "q" * 5000), "a" * 5000, 0.0)])
    prompt = fake.requests[0]["messages"][0]["content"]
    assert "q" * 5000 not in prompt and "a" * 5000 not in prompt and "characters cut" in prompt


def test_a_template_without_others_does_not_show_them():
    template = "Task: {prompt}\nAnswer: {output}\nOne rule:"
    agent, fake = recording_agent("Name the place only.", reflect_on=4, propose_template=template)
    agent.propose(PLAYBOOK, TASK, "Paris", 0.0, failures=[(OTHER, "The Rhine.", 0.0)])
    assert OTHER.prompt not in fake.requests[0]["messages"][0]["content"]


def test_a_rule_echoing_another_shown_task_is_refused():
    agent, _ = recording_agent(OTHER.prompt, reflect_on=2)
    assert agent.propose(PLAYBOOK, TASK, "Paris", 0.0, failures=[(OTHER, "The Rhine.", 0.0)]) is None
    assert agent.stats()["echoed"] == 1
    agent, _ = recording_agent("The Rhine flows through many big European cities.", reflect_on=2)
    answer = "The Rhine flows through many big European cities."
    assert agent.propose(PLAYBOOK, TASK, "Paris", 0.0, failures=[(OTHER, answer, 0.0)]) is None
    assert agent.stats()["echoed"] == 1


@pytest.mark.parametrize(("value", "error"), [(0, ValueError), (17, ValueError), (2.0, TypeError),
                                              (True, TypeError), ("2", TypeError)])
def test_reflect_on_is_an_int_from_1_to_16(value, error):
    with pytest.raises(error, match="reflect_on"):
        LLMAgent(FakeProvider(lambda m, **o: "x"), reflect_on=value)


def test_an_unknown_template_field_names_others_among_the_known_ones():
    with pytest.raises(ValueError, match=r"\{others\}"):
        LLMAgent(FakeProvider(lambda m, **o: "x"), propose_template="{prompt} {output} {other}")
