"""`StalenessConformance`: the behaviour every `agentdescent.merge.staleness.StalenessPolicy` must have.

Subclass it under a ``Test`` name and define ``make_policy()``. Plain Python (no pytest import).
"""

from __future__ import annotations

from ...merge.staleness import StaleAction, StalenessPolicy
from ...seams import adopt, missing_members
from ._checks import check

__all__ = ["StalenessConformance"]


class StalenessConformance:
    """The rules every staleness policy keeps (SPEC §4), checked over a grid of eta and alpha.

    The checks: the required members exist and ``name`` is a non-empty ``str``; ``decide``
    returns a `agentdescent.merge.staleness.StaleAction`; a fresh diff (``eta == 0``) that is not
    contract-breaking is accepted; a stale contract-breaking diff is discarded; and the
    decision is a pure function of its arguments (asked twice, and of two instances).
    """

    #: The staleness values and tolerances the checks try.
    etas = range(0, 9)
    alphas = range(0, 6)

    def make_policy(self) -> StalenessPolicy:
        """Return a new policy; every check calls this once.

        Raises:
            NotImplementedError: always, here; a subclass must override it.
        """
        raise NotImplementedError(f"{type(self).__name__}.make_policy(self) is not defined; return the policy")

    def _policy(self) -> StalenessPolicy:
        return adopt(self.make_policy(), StalenessPolicy, "make_policy()")

    def test_has_the_required_members_and_a_name(self) -> None:
        """``decide`` exists and ``name`` is a non-empty str."""
        policy = self.make_policy()
        missing = missing_members(policy, StalenessPolicy)
        check(not missing, f"a StalenessPolicy needs decide() and name; it lacks {', '.join(missing)}")
        check(isinstance(policy.name, str) and bool(policy.name.strip()),
              f"name must be a non-empty str, got {policy.name!r}")

    def test_decide_returns_a_stale_action(self) -> None:
        """Every answer is a `StaleAction`."""
        policy = self._policy()
        for eta in self.etas:
            for alpha in self.alphas:
                for breaking in (False, True):
                    action = policy.decide(eta, alpha, breaking)
                    check(isinstance(action, StaleAction),
                          f"decide({eta}, {alpha}, {breaking}) returned {action!r}, not a StaleAction")

    def test_a_fresh_diff_is_accepted(self) -> None:
        """``eta == 0`` and not contract-breaking: ACCEPT, whatever alpha."""
        policy = self._policy()
        for alpha in self.alphas:
            action = policy.decide(0, alpha, False)
            check(action is StaleAction.ACCEPT, f"decide(0, {alpha}, False) is {action!r}; a fresh diff is accepted")

    def test_a_stale_contract_breaking_diff_is_discarded(self) -> None:
        """``eta > 0`` and contract-breaking: DISCARD under every policy."""
        policy = self._policy()
        for eta in self.etas:
            if eta == 0:
                continue
            for alpha in self.alphas:
                action = policy.decide(eta, alpha, True)
                check(action is StaleAction.DISCARD,
                      f"decide({eta}, {alpha}, True) is {action!r}; a stale contract-breaking diff is discarded")

    def test_the_decision_is_pure(self) -> None:
        """The same arguments always give the same action, on one instance and on two."""
        first, second = self._policy(), self._policy()
        for eta in self.etas:
            for alpha in self.alphas:
                for breaking in (False, True):
                    a = first.decide(eta, alpha, breaking)
                    check(a == first.decide(eta, alpha, breaking) == second.decide(eta, alpha, breaking),
                          f"decide({eta}, {alpha}, {breaking}) is not a pure function of its arguments")
