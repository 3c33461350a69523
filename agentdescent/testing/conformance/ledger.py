"""`LedgerConformance`: the behaviour every `agentdescent.ledger.Ledger` must have, as a pytest-style class.

Subclass it in a test module and give it a ``make_ledger(tmp_path)`` for your ledger;
pytest then runs every check against it. It is plain Python (no pytest import), so it
runs anywhere.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ...errors import CASConflict, LedgerError
from ...ledger import Ledger
from ...seams import missing_members
from ._checks import check as _check
from ._checks import expect_raises as _expect_raises

__all__ = ["LedgerConformance"]


class LedgerConformance:
    """The behaviour every `agentdescent.ledger.Ledger` must have, as a pytest-style test class.

    The engines trust a ledger for version numbering and compare-and-swap, so a
    third-party ledger (Postgres, Redis, a service) has to keep exactly the rules the
    shipped `MemoryLedger` and `SqliteLedger` keep. Subclass this class in a test module
    under a name starting with ``Test`` and define `make_ledger`; pytest then runs every
    ``test_*`` method below against a fresh ledger each. The checks cover: ``register``
    creates version 1 and is a no-op on a known artifact; ``head``, ``versions`` and
    ``history`` agree; ``commit`` returns ``base + 1``; a stale or future base raises
    `CASConflict` with the right attributes and changes nothing; threads committing
    at once never lose or duplicate a version, and never see a torn head; unknown
    artifacts raise `LedgerError`; states, audit records and blast radii round-trip
    exactly, as copies the caller may mutate; writes inside ``atomic()`` land.

    Input validation (which ``TypeError`` a bad state raises) and log output are the
    shipped ledgers' house style, not part of the contract, so they are not checked.

    The class imports nothing from pytest: a failed check raises ``AssertionError``
    whose message names the property that broke (even under ``python -O``). Each
    ``test_*`` method is a plain method taking a scratch folder, so another runner can
    call it directly.

    Attributes:
        threads: how many threads race in the concurrency checks.
        commits_per_thread: how many commits each racing thread lands.
        join_timeout: seconds to wait for the racing threads before failing.

    Examples:
        In ``tests/test_my_ledger.py``:

        ```python
        from agentdescent.testing import LedgerConformance
        from my_package import RedisLedger

        class TestRedisLedger(LedgerConformance):
            commits_per_thread = 10  # a remote store: keep the race short

            def make_ledger(self, tmp_path):
                return RedisLedger(URL, prefix=f"t_{tmp_path.name}")

            def close_ledger(self, ledger):
                ledger.drop_prefix_and_close()
        ```

        ``tests/test_ledger_postgres.py`` runs it on `agentdescent.ledger.PostgresLedger`
        against a real server, one schema per check.
    """

    threads: int = 4
    commits_per_thread: int = 25
    join_timeout: float = 60.0

    def make_ledger(self, tmp_path: Path) -> Ledger:
        """Return a new, empty ledger; every check calls this once.

        Args:
            tmp_path: a scratch folder for this check only (pytest's ``tmp_path``).

        Raises:
            NotImplementedError: always, here; a subclass must override it.
        """
        raise NotImplementedError(
            f"{type(self).__name__}.make_ledger(self, tmp_path) is not defined; return a "
            "new, empty Ledger from it (for example SqliteLedger(tmp_path / 'ledger.sqlite'))"
        )

    def close_ledger(self, ledger: Ledger) -> None:
        """Release what `make_ledger` opened, after each check; does nothing by default.

        Args:
            ledger: the ledger `make_ledger` returned.
        """

    @contextmanager
    def _ledger(self, tmp_path: Path) -> Iterator[Ledger]:
        ledger = self.make_ledger(tmp_path)
        try:
            yield ledger
        finally:
            self.close_ledger(ledger)

    # ----------------------------------------------------------------- register

    def test_implements_the_protocol(self, tmp_path: Path) -> None:
        """The ledger has every required method of the `Ledger` seam."""
        with self._ledger(tmp_path) as ledger:
            missing = missing_members(ledger, Ledger)
            _check(
                not missing,
                f"implements the Ledger seam: {type(ledger).__name__} lacks {', '.join(missing)} "
                f"(required: {', '.join(Ledger.REQUIRED)})",
            )

    def test_register_creates_version_one(self, tmp_path: Path) -> None:
        """``register`` stores the state as version 1, seen alike by head, versions, history."""
        with self._ledger(tmp_path) as ledger:
            _check(ledger.versions() == {}, "a new ledger is empty: versions() must be {}")
            ledger.register("a", {"k": "v"}, 0.2)
            _check(
                ledger.head("a") == (1, {"k": "v"}),
                f"register creates version 1: head('a') is {ledger.head('a')!r}, "
                "expected (1, {'k': 'v'})",
            )
            _check(
                ledger.versions() == {"a": 1},
                f"register creates version 1: versions() is {ledger.versions()!r}",
            )
            history = ledger.history("a")
            _check(
                [(e.artifact_id, e.version, e.state, e.meta) for e in history]
                == [("a", 1, {"k": "v"}, {})],
                f"register creates version 1: history('a') is {history!r}, expected one "
                "entry ('a', 1, {'k': 'v'}, meta={})",
            )

    def test_register_of_a_known_artifact_is_a_noop(self, tmp_path: Path) -> None:
        """Registering a known id again keeps its head and history (a resumed run)."""
        with self._ledger(tmp_path) as ledger:
            ledger.register("a", {"k": "first"}, 0.2)
            ledger.commit("a", {"k": "second"}, 1)
            ledger.register("a", {"k": "other"}, 0.2)
            _check(
                ledger.head("a") == (2, {"k": "second"}),
                f"register of a known artifact is a no-op: head('a') became {ledger.head('a')!r}",
            )
            versions = [e.version for e in ledger.history("a")]
            _check(
                versions == [1, 2],
                f"register of a known artifact is a no-op: history versions became {versions}",
            )

    def test_register_copies_the_state(self, tmp_path: Path) -> None:
        """Changing the caller's dict after ``register`` does not change the ledger."""
        with self._ledger(tmp_path) as ledger:
            state = {"k": "v"}
            ledger.register("a", state, 0.2)
            state["k"] = "changed"
            _check(
                ledger.head("a") == (1, {"k": "v"}),
                "register stores a copy: mutating the caller's dict changed the ledger",
            )

    # ----------------------------------------------------------------- commit

    def test_commit_returns_base_plus_one(self, tmp_path: Path) -> None:
        """Each commit on the head creates and returns ``base + 1``."""
        with self._ledger(tmp_path) as ledger:
            ledger.register("a", {"k": "1"}, 0.2)
            for base in range(1, 6):
                new = ledger.commit("a", {"k": str(base + 1)}, base)
                _check(
                    new == base + 1, f"commit returns base + 1: commit on {base} returned {new!r}"
                )
                _check(
                    ledger.head("a") == (base + 1, {"k": str(base + 1)}),
                    f"commit moves the head: after committing on {base}, head('a') is "
                    f"{ledger.head('a')!r}",
                )

    def test_stale_or_future_base_raises_cas_conflict_and_changes_nothing(
        self, tmp_path: Path
    ) -> None:
        """A base that is not the head raises `CASConflict` naming both; nothing is written."""
        with self._ledger(tmp_path) as ledger:
            ledger.register("a", {"k": "1"}, 0.2)
            ledger.commit("a", {"k": "2"}, 1)
            for base in (1, 3, 7):
                err = _expect_raises(
                    CASConflict,
                    lambda base=base: ledger.commit("a", {"k": "lost"}, base),
                    f"a commit on base {base} while the head is 2",
                )
                got = (err.artifact_id, err.base_version, err.head_version)
                _check(
                    got == ("a", base, 2),
                    f"CASConflict names the artifact, the stale base and the head: got "
                    f"(artifact_id, base_version, head_version) = {got!r}, expected "
                    f"('a', {base}, 2)",
                )
                _check(
                    isinstance(err, LedgerError),
                    "CASConflict is a LedgerError (raise agentdescent.ledger.CASConflict)",
                )
                _check(
                    ledger.head("a") == (2, {"k": "2"}) and len(ledger.history("a")) == 2,
                    f"a refused commit changes nothing: after the conflict on base {base}, "
                    f"head('a') is {ledger.head('a')!r} with {len(ledger.history('a'))} versions",
                )

    def test_atomic_lets_writes_inside_it_land(self, tmp_path: Path) -> None:
        """Writes inside ``atomic()`` are seen by the writer at once and by everyone once it ends;
        a conflict inside it changes nothing and leaves the earlier writes."""
        with self._ledger(tmp_path) as ledger:
            ledger.register("a", {"k": "1"}, 0.2)
            with ledger.atomic():
                ledger.commit("a", {"k": "2"}, 1)
                _check(ledger.head("a") == (2, {"k": "2"}),
                       f"inside atomic() the writer reads its own commit: head('a') is {ledger.head('a')!r}")
                _expect_raises(CASConflict, lambda: ledger.commit("a", {"k": "lost"}, 1),
                               "a stale commit inside atomic()")
            _check(ledger.head("a") == (2, {"k": "2"}) and len(ledger.history("a")) == 2,
                   f"after atomic() ends its writes have landed, the refused one not: head('a') is "
                   f"{ledger.head('a')!r} with {len(ledger.history('a'))} versions")

    def test_commit_copies_the_state(self, tmp_path: Path) -> None:
        """Changing the caller's dict after ``commit`` does not change the ledger."""
        with self._ledger(tmp_path) as ledger:
            ledger.register("a", {}, 0.2)
            new = {"k": "v"}
            ledger.commit("a", new, 1)
            new["k"] = "changed"
            _check(
                ledger.head("a") == (2, {"k": "v"}),
                "commit stores a copy: mutating the caller's dict changed the ledger",
            )

    def test_artifacts_are_independent(self, tmp_path: Path) -> None:
        """Commits to one artifact neither move nor unlock another."""
        with self._ledger(tmp_path) as ledger:
            ledger.register("a", {"x": "1"}, 0.1)
            ledger.register("b", {"y": "1"}, 0.8)
            ledger.commit("a", {"x": "2"}, 1)
            _check(
                ledger.versions() == {"a": 2, "b": 1},
                f"artifacts are independent: versions() is {ledger.versions()!r}, expected "
                "{'a': 2, 'b': 1}",
            )
            _expect_raises(
                CASConflict,
                lambda: ledger.commit("b", {"y": "2"}, 2),
                "a commit on 'b' at the head version of 'a'",
            )
            _check(
                ledger.head("b") == (1, {"y": "1"}),
                f"artifacts are independent: head('b') became {ledger.head('b')!r}",
            )

    # ----------------------------------------------------------------- reading

    def test_head_versions_and_history_agree(self, tmp_path: Path) -> None:
        """Every version is in history, oldest first, with its meta; head is its last entry."""
        with self._ledger(tmp_path) as ledger:
            for i, aid in enumerate(["a", "b", "c"]):
                ledger.register(aid, {"n": "1"}, 0.2)
                for base in range(1, i + 3):
                    meta = {"diff_id": f"{aid}{base}", "n": base, "ok": True, "tags": ["x"]}
                    ledger.commit(aid, {"n": str(base + 1)}, base, meta=meta)
            versions = ledger.versions()
            _check(
                versions == {"a": 3, "b": 4, "c": 5},
                f"versions() maps every artifact to its head: got {versions!r}, expected "
                "{'a': 3, 'b': 4, 'c': 5}",
            )
            for aid, head in versions.items():
                history = ledger.history(aid)
                got = [(e.artifact_id, e.version, e.state) for e in history]
                want = [(aid, v, {"n": str(v)}) for v in range(1, head + 1)]
                _check(
                    got == want,
                    f"history({aid!r}) holds every version oldest first: got {got!r}",
                )
                metas = [e.meta for e in history]
                want_metas = [{}] + [
                    {"diff_id": f"{aid}{v}", "n": v, "ok": True, "tags": ["x"]}
                    for v in range(1, head)
                ]
                _check(
                    metas == want_metas,
                    f"history({aid!r}) keeps each commit's meta (and {{}} for version 1): "
                    f"got {metas!r}",
                )
                _check(
                    ledger.head(aid) == (head, history[-1].state),
                    f"head({aid!r}) is the last history entry: head is {ledger.head(aid)!r}, "
                    f"history ends at {history[-1].version}",
                )

    def test_head_and_history_return_copies(self, tmp_path: Path) -> None:
        """Mutating what ``head`` or ``history`` returned does not change the ledger."""
        with self._ledger(tmp_path) as ledger:
            ledger.register("a", {"k": "v"}, 0.2)
            ledger.commit("a", {"k": "w"}, 1, meta={"m": [1]})
            _, state = ledger.head("a")
            state["k"] = "mutated"
            state["new"] = "x"
            _check(
                ledger.head("a") == (2, {"k": "w"}),
                "head returns a copy: mutating the returned state changed the ledger",
            )
            entries = ledger.history("a")
            entries[1].state["k"] = "mutated"
            entries[1].meta["m"].append(2)
            again = ledger.history("a")[1]
            _check(
                again.state == {"k": "w"},
                "history returns copies: mutating an entry's state changed the ledger",
            )
            _check(
                again.meta == {"m": [1]},
                "history returns copies: mutating an entry's meta (deep) changed the ledger",
            )

    def test_unknown_artifact_raises_ledger_error(self, tmp_path: Path) -> None:
        """``head``, ``history``, ``blast_radius`` and ``commit`` of an unknown id raise `LedgerError`."""
        with self._ledger(tmp_path) as ledger:

            def check_unknown(label: str) -> None:
                calls = {
                    "head": lambda: ledger.head("gamma"),
                    "history": lambda: ledger.history("gamma"),
                    "blast_radius": lambda: ledger.blast_radius("gamma"),
                    "commit": lambda: ledger.commit("gamma", {}, 1),
                }
                for method, call in calls.items():
                    err = _expect_raises(LedgerError, call, f"{method}('gamma') on {label}")
                    _check(
                        not isinstance(err, CASConflict),
                        f"{method}('gamma') on {label} raised CASConflict; an unknown "
                        "artifact is a plain LedgerError (retrying cannot help)",
                    )
                    _check(
                        "gamma" in str(err),
                        f"{method}('gamma') on {label}: the LedgerError must name the unknown "
                        f"id, got {str(err)!r}",
                    )

            check_unknown("an empty ledger")
            ledger.register("alpha", {}, 0.2)
            ledger.register("beta", {}, 0.2)
            check_unknown("a ledger holding 'alpha' and 'beta'")
            _check(
                ledger.versions() == {"alpha": 1, "beta": 1},
                f"a failed call on an unknown id registers nothing: versions() is "
                f"{ledger.versions()!r}",
            )

    def test_blast_radius_round_trips(self, tmp_path: Path) -> None:
        """``blast_radius`` returns exactly the float given to ``register``."""
        with self._ledger(tmp_path) as ledger:
            radii = {"zero": 0, "zero-float": 0.0, "fast": 0.3, "one": 1, "odd": 0.123456789}
            for aid, radius in radii.items():
                ledger.register(aid, {}, radius)
            for aid, radius in radii.items():
                got = ledger.blast_radius(aid)
                _check(
                    isinstance(got, float) and got == float(radius),
                    f"blast_radius round-trips: registered {radius!r} for {aid!r}, got {got!r} "
                    "(expected that exact value as a float)",
                )

    def test_any_text_round_trips(self, tmp_path: Path) -> None:
        """Keys and values keep every character: accents, emoji, quotes, newlines, NUL, empty."""
        state = {
            "règle 1": "ne jamais «deviner»",
            "emoji 🧪": "line\nbreak\ttab\x00nul",
            "": '"quoted" \\ back',
            "long": "x" * 100_000,
        }
        with self._ledger(tmp_path) as ledger:
            ledger.register("a", state, 0.2)
            ledger.commit("a", {**state, "k": "2"}, 1, meta={"note": "é\x00🧪"})
            _check(
                ledger.history("a")[0].state == state,
                "state text round-trips exactly: version 1 came back changed",
            )
            _check(
                ledger.head("a") == (2, {**state, "k": "2"}),
                "state text round-trips exactly: the head came back changed",
            )
            _check(
                ledger.history("a")[1].meta == {"note": "é\x00🧪"},
                f"meta text round-trips exactly: got {ledger.history('a')[1].meta!r}",
            )

    # ----------------------------------------------------------------- concurrency

    def _run_threads(self, targets: list[Callable[[], None]], what: str) -> None:
        errors: list[BaseException] = []

        def guarded(target: Callable[[], None]) -> None:
            try:
                target()
            except BaseException as exc:  # reported on the calling thread below
                errors.append(exc)

        threads = [threading.Thread(target=guarded, args=(t,), daemon=True) for t in targets]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(self.join_timeout)
        _check(
            not any(thread.is_alive() for thread in threads),
            f"{what}: a thread was still running after join_timeout={self.join_timeout} s "
            "(a deadlock, or raise join_timeout for a slow ledger)",
        )
        if errors:
            raise errors[0]

    def test_concurrent_commits_lose_and_duplicate_nothing(self, tmp_path: Path) -> None:
        """Threads racing compare-and-swap each land every commit exactly once."""
        n, attempts = self.threads, self.commits_per_thread
        won: list[tuple[int, dict[str, str]]] = []
        lock = threading.Lock()
        with self._ledger(tmp_path) as ledger:
            ledger.register("a", {}, 0.2)
            barrier = threading.Barrier(n)

            def racer(wid: int) -> None:
                barrier.wait(timeout=self.join_timeout)
                for attempt in range(attempts):
                    while True:
                        version, state = ledger.head("a")
                        state[f"t{wid}-{attempt}"] = f"{wid}:{attempt}:{version}"
                        try:
                            new = ledger.commit("a", state, version)
                        except CASConflict:
                            continue
                        with lock:
                            won.append((new, state))
                        break

            self._run_threads(
                [lambda wid=wid: racer(wid) for wid in range(n)], "concurrent commits"
            )
            total = n * attempts
            landed = sorted(v for v, _ in won)
            _check(
                landed == list(range(2, total + 2)),
                f"concurrent commits: {total} successful commits should have created versions "
                f"2..{total + 1} once each; they returned {_duplicates_and_gaps(landed, total)}",
            )
            history = ledger.history("a")
            _check(
                [e.version for e in history] == list(range(1, total + 2))
                and ledger.versions() == {"a": total + 1},
                f"concurrent commits: history holds {len(history)} versions and versions() is "
                f"{ledger.versions()!r}; expected 1..{total + 1}",
            )
            lost = [v for v, state in won if history[v - 1].state != state]
            _check(
                not lost,
                f"concurrent commits: the stored state of versions {lost[:10]} is not the "
                "state that commit wrote (an update was lost or overwritten)",
            )
            _check(
                len(ledger.head("a")[1]) == total,
                f"concurrent commits: the head holds {len(ledger.head('a')[1])} keys, expected "
                f"all {total} (each commit added one on top of the head it read)",
            )

    def test_head_is_never_torn(self, tmp_path: Path) -> None:
        """Readers racing a committer always get a version together with that version's state."""
        commits = self.threads * self.commits_per_thread
        with self._ledger(tmp_path) as ledger:
            ledger.register("a", {"v": "1"}, 0.2)
            done = threading.Event()
            torn: list[tuple[int, dict[str, str]]] = []

            def writer() -> None:
                try:
                    for base in range(1, commits + 1):
                        ledger.commit("a", {"v": str(base + 1), "pad": "p" * (base % 7)}, base)
                finally:
                    done.set()

            def reader() -> None:
                while not done.is_set():
                    version, state = ledger.head("a")
                    if state.get("v") != str(version):
                        torn.append((version, state))
                        return

            readers = [reader for _ in range(max(1, self.threads - 1))]
            self._run_threads([writer, *readers], "readers racing a committer")
            _check(
                not torn,
                f"head is never torn: head() returned {torn[:1]!r}, a version paired with "
                "another version's state",
            )
            _check(
                ledger.head("a")[0] == commits + 1,
                f"readers racing a committer: the head is {ledger.head('a')[0]}, expected "
                f"{commits + 1}",
            )


def _duplicates_and_gaps(landed: list[int], total: int) -> str:
    counts = Counter(landed)
    duplicates = sorted(v for v, n in counts.items() if n > 1)
    missing = sorted(set(range(2, total + 2)) - set(counts))
    return f"duplicates {duplicates[:10]}, never returned {missing[:10]}"

