"""Rewards: `Score`, the reward contract, the built-in rewards with feedback, and model judges.

Owns the built-ins and `check_reward` (`builtin`) and `judge` / `JudgeReward` (`judge`: a reward a
model grades). Imports only the ground floor; it must not import the engine (scoring an artifact
on a test set, `evaluate`, runs calls and so lives in `agentdescent.engine.testset`).
"""

from .builtin import (
    FEEDBACK_LIMIT,
    REWARD_NAMES,
    Score,
    answer_regex,
    any_target,
    by_name,
    check_reward,
    contains_answer,
    exact_match,
    normalized_match,
    number_within,
    one_of,
)
from .judge import (
    DEFAULT_JUDGE_TEMPLATE,
    JudgeReward,
    judge,
    read_verdict,
)

__all__ = [
    "answer_regex",
    "any_target",
    "by_name",
    "check_reward",
    "contains_answer",
    "DEFAULT_JUDGE_TEMPLATE",
    "exact_match",
    "FEEDBACK_LIMIT",
    "judge",
    "JudgeReward",
    "normalized_match",
    "number_within",
    "one_of",
    "read_verdict",
    "REWARD_NAMES",
    "Score",
]
