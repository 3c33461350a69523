"""Several drivers on one artifact through one PostgreSQL ledger: nothing lost, kills and a restarted server survived, and what it costs against SQLite.

Starts a throwaway PostgreSQL server of its own (`agentdescent.testing.pgcluster.PostgresCluster`,
``fsync`` on: a real server's numbers) and measures, on this one machine:

- **commits**: N processes (1, 4, 8) each landing ``--commits`` compare-and-swap commits on
  one artifact (read the head, commit on it, again on a `CASConflict`), on a `PostgresLedger`
  and on a `SqliteLedger` file, ``--repeats`` times each: commits per second (all processes
  together), the latency of a commit that landed (median and 90th percentile, over every
  commit of the repeat), the conflicts, and whether every commit is in the history once;
- **drivers**: N ``evolve()`` processes (1, 4, 8; the offline router domain, ``--rounds``
  rounds, each its own seed and run id) on one artifact, on both ledgers: commits per
  second and the merge latency (the ledger's outermost ``atomic()`` block, in which a round
  is decided, committed and saved); and the checks after each: every driver finished and
  its progress is recorded (its rounds, commits and tokens as its result says), the commits
  the records hold are the ledger's versions, every version is signed by one of the
  drivers, the final head is the last version of the history;
- **dask**: the same drivers launched as tasks on a Dask ``LocalCluster``'s worker processes,
  with the same checks;
- **kills**: four sharing drivers, one of them killed with SIGKILL every 0.3-1.2 s (a seeded
  RNG picks which and when) and started again on what is left (it resumes), until
  ``--kills`` kills; after every kill the ledger opens with its history check, and the
  killed driver's saved rounds are numbered 1..n, none lost since the last check, and the
  versions signed by it are the commits its progress records (the three others run on
  meanwhile); at the end every driver finishes its rounds and the checks hold for all;
- **restart**: four drivers running while the server is restarted twice (down about a
  second each time), with the default ``retry_seconds``: each driver goes on (its calls
  reconnect) or stops with `LedgerUnavailable`; then the server stopped for longer than a
  short bound (``retry_seconds=3``; down until every driver has stopped): each stops with `LedgerUnavailable`
  within the bound of the first call the server failed (plus one attempt), and resuming them
  finishes the run.

Ratios are PostgreSQL over SQLite, per repeat (the median and the range over the repeats).
It measures and checks; it exits 1 if a check fails.

    python bench/several_drivers.py --json /tmp/several_drivers.json

About 4 minutes on a 2-core machine with the defaults.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentdescent.engine.progress import read_all_progress  # noqa: E402
from agentdescent.ledger import PostgresLedger, SqliteLedger  # noqa: E402
from agentdescent.ledger.dsn import is_dsn  # noqa: E402
from agentdescent.testing.pgcluster import PostgresCluster  # noqa: E402
from bench.jsonout import write_json  # noqa: E402

ARTIFACT = "artifact"

RACER = textwrap.dedent("""
    import json, sys, time
    sys.path.insert(0, {root!r})
    from agentdescent.errors import CASConflict
    from agentdescent.ledger import PostgresLedger, SqliteLedger
    from agentdescent.ledger.dsn import is_dsn
    where, me, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ledger = PostgresLedger(where) if is_dsn(where) else SqliteLedger(where)
    ledger.head("a")
    print("ready", flush=True)
    sys.stdin.readline()  # all start together
    took, lost = [], 0
    while len(took) < count:
        version, _ = ledger.head("a")
        started = time.perf_counter()
        try:
            ledger.commit("a", {{"n": f"{{me}}-{{len(took)}}"}}, version, meta={{"by": me, "i": len(took)}})
        except CASConflict:
            lost += 1
            continue
        took.append(time.perf_counter() - started)
    ledger.close()
    print(json.dumps({{"took": took, "lost": lost}}), flush=True)
""").format(root=str(ROOT))


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _open(where: str, **options: Any) -> Any:
    return PostgresLedger(where, **options) if is_dsn(where) else SqliteLedger(where, **options)


def _fresh(kind: str, server: PostgresCluster, tmp: Path, name: str) -> str:
    """A new, empty ledger of ``kind`` ("postgres": a new database; "sqlite": a new file), made once."""
    where = server.create_database(name) if kind == "postgres" else str(tmp / f"{name}.sqlite")
    _open(where).close()
    return where


# --------------------------------------------------------------------------- commits


def race(where: str, processes: int, commits: int) -> dict[str, Any]:
    with _open(where) as ledger:
        ledger.register("a", {"n": ""}, 0.2)
        base = ledger.head("a")[0]
    procs = [subprocess.Popen([sys.executable, "-c", RACER, where, str(i), str(commits)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for i in range(processes)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    started = time.perf_counter()
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    outs = [json.loads(p.communicate(timeout=600)[0].strip().splitlines()[-1]) for p in procs]
    wall = time.perf_counter() - started
    with _open(where) as ledger:
        history = ledger.history("a")[base:]
    made = sorted((e.meta["by"], e.meta["i"]) for e in history)
    took = [t for o in outs for t in o["took"]]
    return {"commits": len(took), "seconds": wall, "per_second": len(took) / wall,
            "p50_ms": 1000 * _pct(took, 0.5), "p90_ms": 1000 * _pct(took, 0.9),
            "conflicts": sum(o["lost"] for o in outs),
            "each_once": made == sorted((str(i), n) for i in range(processes) for n in range(commits))}


# --------------------------------------------------------------------------- drivers


def _driver(where: str, run_id: str, seed: int, rounds: int, **extra: Any) -> subprocess.Popen[str]:
    args = {"ledger": where, "run_id": run_id, "seed": seed, "rounds": rounds, **extra}
    return subprocess.Popen([sys.executable, "-m", "bench._drivers", json.dumps(args)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _answer(proc: subprocess.Popen[str], timeout: float = 600) -> dict[str, Any]:
    out, err = proc.communicate(timeout=timeout)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if not lines:
        return {"error": f"exit {proc.returncode}", "message": err[-600:]}
    return json.loads(lines[-1])


def audit(where: str, outs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What the ledger holds against what the drivers said (the checks of the drivers and dask rows)."""
    with _open(where, read_only=True) as ledger:  # the history check on open is the first check
        saved = read_all_progress(ledger, ARTIFACT)
        history = ledger.history(ARTIFACT)
        head_version, head_state = ledger.head(ARTIFACT)
    signed = {rid: sum(1 for e in history if e.meta.get("driver") == rid) for rid in outs}
    problems = []
    for rid, out in outs.items():
        record = saved.get(rid)
        if "error" in out:
            problems.append(f"{rid} failed: {out['error']}: {out['message'][:200]}")
        elif record is None:
            problems.append(f"{rid}: no progress recorded")
        elif (len(record.rounds), record.commits, record.tokens) != (out["rounds"], out["commits"], out["tokens"]):
            problems.append(f"{rid}: recorded {len(record.rounds)} rounds / {record.commits} commits / "
                            f"{record.tokens} tokens, its result says {out['rounds']} / {out['commits']} / "
                            f"{out['tokens']}")
        if record is not None and signed[rid] != record.commits:
            problems.append(f"{rid}: {signed[rid]} versions signed by it, its progress records {record.commits}")
    unsigned = [e.version for e in history[1:] if e.meta.get("driver") not in outs]
    if unsigned:
        problems.append(f"versions {unsigned[:5]} are signed by no driver")
    if [e.version for e in history] != list(range(1, head_version + 1)) or history[-1].state != head_state:
        problems.append("the head is not the last version of a gap-free history")
    if sum(p.commits for p in saved.values()) != head_version - 1:
        problems.append(f"the records hold {sum(p.commits for p in saved.values())} commits, the ledger "
                        f"{head_version - 1}")
    return {"versions": head_version, "problems": problems}


def drivers_row(where: str, count: int, rounds: int) -> dict[str, Any]:
    started = time.perf_counter()
    procs = {f"d{i}": _driver(where, f"d{i}", i, rounds) for i in range(count)}
    outs = {rid: _answer(p) for rid, p in procs.items()}
    wall = time.perf_counter() - started
    merges = [m for o in outs.values() for m in o.get("merges", [])]
    writes = [m for o in outs.values() for m in o.get("writes", [])]
    commits = sum(o.get("commits", 0) for o in outs.values())
    return {"drivers": count, "commits": commits, "seconds": wall, "commits_per_second": commits / wall,
            "merge_p50_ms": 1000 * _pct(merges, 0.5), "merge_p90_ms": 1000 * _pct(merges, 0.9),
            "write_p50_ms": 1000 * _pct(writes, 0.5), "write_p90_ms": 1000 * _pct(writes, 0.9),
            **audit(where, outs)}


def dask_row(where: str, count: int, rounds: int) -> dict[str, Any]:
    from dask.distributed import Client, LocalCluster

    from bench._drivers import drive

    with LocalCluster(n_workers=count, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=40) as cluster, Client(cluster) as client:
        workers = list(client.scheduler_info()["workers"])
        started = time.perf_counter()
        futures = {f"d{i}": client.submit(drive, where, f"d{i}", i, rounds, pure=False,
                                          workers=[workers[i % len(workers)]]) for i in range(count)}
        outs = {rid: f.result() for rid, f in futures.items()}
        wall = time.perf_counter() - started
    merges = [m for o in outs.values() for m in o.get("merges", [])]
    commits = sum(o.get("commits", 0) for o in outs.values())
    return {"drivers": count, "workers": len(workers), "commits": commits, "seconds": wall,
            "commits_per_second": commits / wall, "merge_p50_ms": 1000 * _pct(merges, 0.5), **audit(where, outs)}


# --------------------------------------------------------------------------- kills


def _check_after_kill(where: str, ids: list[str], before: dict[str, int]) -> list[str]:
    """The checks after a kill, on the drivers ``ids`` that are not running (the one killed): the others
    go on committing meanwhile, so their records and the history are never read at one instant."""
    problems = []
    try:
        with PostgresLedger(where, read_only=True) as ledger:
            saved = read_all_progress(ledger, ARTIFACT) if ledger.versions() else {}
            history = ledger.history(ARTIFACT) if ledger.versions() else []
    except Exception as exc:  # the check itself: any failure to open or read is a finding
        return [f"the ledger does not open or read: {type(exc).__name__}: {exc}"]
    for rid in ids:
        record = saved.get(rid)
        if record is None:
            continue
        numbers = [r.index for r in record.rounds]
        if numbers != list(range(1, len(numbers) + 1)):
            problems.append(f"{rid}: saved rounds are numbered {numbers[:8]}...")
        if len(numbers) < before.get(rid, 0):
            problems.append(f"{rid}: {len(numbers)} saved rounds, {before[rid]} before the kill")
        before[rid] = len(numbers)
        signed = sum(1 for e in history if e.meta.get("driver") == rid)
        if signed != record.commits:
            problems.append(f"{rid}: {signed} versions signed, {record.commits} commits recorded")
    return problems


def _saved_rounds(where: str, ids: list[str]) -> dict[str, int]:
    with PostgresLedger(where, read_only=True) as ledger:
        saved = read_all_progress(ledger, ARTIFACT) if ledger.versions() else {}
    return {rid: len(saved[rid].rounds) if rid in saved else 0 for rid in ids}


def kills_row(where: str, kills: int, planned: int, seed: int) -> dict[str, Any]:
    """Four sharing drivers, one killed at a random moment and started again (on what is left) until ``kills``."""
    rng = random.Random(seed)
    ids = [f"k{i}" for i in range(4)]
    latency = 0.01

    def start(rid: str) -> subprocess.Popen[str] | None:
        left = planned - _saved_rounds(where, [rid])[rid]
        return _driver(where, rid, ids.index(rid), left, latency=latency) if left > 0 else None

    live = {rid: start(rid) for rid in ids}
    before: dict[str, int] = {}
    done_kills, problems = 0, []
    while done_kills < kills:
        time.sleep(rng.uniform(0.3, 1.2))
        running = [rid for rid, p in live.items() if p is not None and p.poll() is None]
        if not running:  # every driver finished its rounds before the kills were done: plan more
            planned += 10
            live = {rid: start(rid) for rid in ids}
            continue
        rid = rng.choice(running)
        proc = live[rid]
        assert proc is not None
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        done_kills += 1
        problems += [f"after kill {done_kills}: {p}" for p in _check_after_kill(where, [rid], before)]
        live[rid] = start(rid)
    for proc in live.values():
        if proc is not None:
            proc.wait(timeout=600)
    final = {rid: (_answer(p) if (p := start(rid)) is not None else {}) for rid in ids}
    with PostgresLedger(where, read_only=True) as ledger:
        saved = read_all_progress(ledger, ARTIFACT)
        head = ledger.head(ARTIFACT)[0]
    for rid in ids:
        if "error" in final[rid]:
            problems.append(f"{rid} did not resume: {final[rid]['message'][:200]}")
        elif len(saved[rid].rounds) != planned:
            problems.append(f"{rid}: {len(saved[rid].rounds)} rounds at the end, planned {planned}")
    if sum(p.commits for p in saved.values()) != head - 1:
        problems.append("the records' commits are not the ledger's versions")
    return {"kills": done_kills, "drivers": len(ids), "rounds_each": planned, "versions": head,
            "problems": problems}


# --------------------------------------------------------------------------- restarts


def restart_row(server: PostgresCluster, where: str, rounds: int) -> dict[str, Any]:
    ids = [f"r{i}" for i in range(4)]
    procs = {rid: _driver(where, rid, i, rounds, latency=0.02) for i, rid in enumerate(ids)}
    time.sleep(1.5)
    down = []
    for _ in range(2):
        t = time.monotonic()
        server.restart(mode="fast", down_seconds=1.0)
        down.append(time.monotonic() - t)
        time.sleep(1.5)
    outs = {rid: _answer(p) for rid, p in procs.items()}
    went_on = [rid for rid, o in outs.items() if "error" not in o]
    typed = [rid for rid, o in outs.items() if o.get("error") == "LedgerUnavailable"]
    other = {rid: o for rid, o in outs.items() if "error" in o and o["error"] != "LedgerUnavailable"}
    left = _saved_rounds(where, ids)
    resumed = {rid: _answer(_driver(where, rid, ids.index(rid), rounds - left[rid], latency=0.02)) for rid in typed
               if rounds > left[rid]}
    final = {rid: resumed.get(rid, outs[rid]) for rid in ids}
    checks = audit(where, {rid: o for rid, o in final.items()}) if not other else {"problems": [str(other)]}
    return {"restarts": 2, "down_s": [round(d, 2) for d in down], "went_on": len(went_on),
            "stopped_typed": len(typed), "other_errors": len(other), **checks}


def outage_row(server: PostgresCluster, where: str, rounds: int, bound: float = 3.0) -> dict[str, Any]:
    ids = [f"o{i}" for i in range(4)]
    procs = {rid: _driver(where, rid, i, rounds, latency=0.05, retry_seconds=bound) for i, rid in enumerate(ids)}
    time.sleep(1.5)
    server.stop("fast")
    stopped_at = time.monotonic()
    outs = {}
    ends = {}
    for rid, p in procs.items():
        outs[rid] = _answer(p)
        ends[rid] = time.monotonic() - stopped_at
    server.start()
    typed = [rid for rid, o in outs.items() if o.get("error") == "LedgerUnavailable"]
    left = _saved_rounds(where, ids)
    resumed = {rid: _answer(_driver(where, rid, ids.index(rid), rounds - left[rid], latency=0.05))
               if rounds > left[rid] else outs[rid] for rid in ids}
    checks = audit(where, resumed)
    gave_up = [o["outage_s"] for o in outs.values() if o.get("outage_s") is not None]
    return {"bound_s": bound, "stopped_typed": len(typed), "drivers": len(ids),
            "gave_up_after_s": round(max(gave_up), 2) if gave_up else None,
            "exited_after_stop_s": round(max(ends.values()), 2),
            "resumed_ok": sum("error" not in o for o in resumed.values()), **checks}


# --------------------------------------------------------------------------- the tables


def _ratio(per: dict[str, list[dict[str, Any]]], key: str) -> list[float]:
    """``key`` on PostgreSQL over SQLite, repeat by repeat."""
    return [p[key] / q[key] for p, q in zip(per["postgres"], per["sqlite"])]


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--drivers", default="1,4,8", help="driver counts (comma-separated)")
    parser.add_argument("--commits", type=int, default=100, help="commits per process in the commits rows")
    parser.add_argument("--rounds", type=int, default=8, help="rounds per evolve() driver")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kills", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip", default="", help="sections to skip: commits,drivers,dask,kills,restart")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.drivers.split(",") if n]
    skip = set(args.skip.split(",")) - {""}
    report: dict[str, Any] = {"command": "python bench/several_drivers.py " + " ".join(argv or sys.argv[1:]),
                              "cpus": os.cpu_count()}
    failed = False
    names = iter(f"b{os.getpid()}_{i}" for i in range(10_000))
    with PostgresCluster(durable=True) as server, tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        report["server"] = "PostgreSQL (fsync on), a throwaway cluster on a Unix socket"
        if "commits" not in skip:
            rows = []
            print(f"commits: N processes x {args.commits} CAS commits on one artifact ({args.repeats} repeats)")
            print(f"{'N':>3} {'ledger':>9} {'commits/s':>18} {'p50 ms':>16} {'p90 ms':>16} {'conflicts':>10} "
                  f"{'each once':>9}")
            for n in counts:
                per = {kind: [race(_fresh(kind, server, tmp, next(names)), n, args.commits)
                              for _ in range(args.repeats)] for kind in ("postgres", "sqlite")}
                for kind, runs in per.items():
                    ok = all(r["each_once"] for r in runs)
                    failed |= not ok
                    print(f"{n:>3} {kind:>9} {_spread([r['per_second'] for r in runs]):>18} "
                          f"{_spread([r['p50_ms'] for r in runs]):>16} {_spread([r['p90_ms'] for r in runs]):>16} "
                          f"{sum(r['conflicts'] for r in runs):>10} {str(ok):>9}")
                ratio, lat = _ratio(per, "per_second"), _ratio(per, "p50_ms")
                print(f"{n:>3} {'pg/sqlite':>9} {_spread(ratio):>18} {_spread(lat):>16}")
                rows.append({"processes": n, "runs": per, "throughput_ratio": ratio, "p50_ratio": lat})
            report["commits"] = rows
        if "drivers" not in skip:
            rows = []
            print(f"\ndrivers: N evolve() processes x {args.rounds} rounds on one artifact ({args.repeats} repeats)")
            print(f"{'N':>3} {'ledger':>9} {'commits/s':>18} {'merge p50 ms':>18} {'merge p90 ms':>18} "
                  f"{'writes p50 ms':>16} {'writes p90 ms':>16} {'commits':>8} checks")
            for n in counts:
                per = {kind: [drivers_row(_fresh(kind, server, tmp, next(names)), n, args.rounds)
                              for _ in range(args.repeats)] for kind in ("postgres", "sqlite")}
                for kind, runs in per.items():
                    problems = [p for r in runs for p in r["problems"]]
                    failed |= bool(problems)
                    print(f"{n:>3} {kind:>9} {_spread([r['commits_per_second'] for r in runs]):>18} "
                          f"{_spread([r['merge_p50_ms'] for r in runs]):>18} "
                          f"{_spread([r['merge_p90_ms'] for r in runs]):>18} "
                          f"{_spread([r['write_p50_ms'] for r in runs]):>16} "
                          f"{_spread([r['write_p90_ms'] for r in runs]):>16} "
                          f"{sum(r['commits'] for r in runs):>8} {'ok' if not problems else problems[:3]}")
                ratio, lat = _ratio(per, "commits_per_second"), _ratio(per, "merge_p50_ms")
                wlat = _ratio(per, "write_p50_ms")
                print(f"{n:>3} {'pg/sqlite':>9} {_spread(ratio):>18} {_spread(lat):>18} {'':>18} {_spread(wlat):>16}")
                rows.append({"drivers": n, "runs": per, "throughput_ratio": ratio, "merge_p50_ratio": lat,
                             "write_p50_ratio": wlat})
            report["drivers"] = rows
        if "dask" not in skip:
            n = min(4, max(counts))
            row = dask_row(_fresh("postgres", server, tmp, next(names)), n, args.rounds)
            failed |= bool(row["problems"])
            print(f"\ndask: {n} drivers as tasks on a LocalCluster of {row['workers']} worker processes: "
                  f"{row['commits']} commits, {row['commits_per_second']:.2f} commits/s, merge p50 "
                  f"{row['merge_p50_ms']:.1f} ms, checks {'ok' if not row['problems'] else row['problems'][:3]}")
            report["dask"] = row
        if "kills" not in skip:
            row = kills_row(_fresh("postgres", server, tmp, next(names)), args.kills, args.rounds, args.seed)
            failed |= bool(row["problems"])
            print(f"\nkills: {row['kills']} SIGKILLs of {row['drivers']} sharing drivers; {row['versions']} versions; "
                  f"every driver finished {row['rounds_each']} rounds; checks "
                  f"{'ok' if not row['problems'] else row['problems'][:3]}")
            report["kills"] = row
        if "restart" not in skip:
            row = restart_row(server, _fresh("postgres", server, tmp, next(names)), max(args.rounds, 30))
            failed |= bool(row["problems"]) or row["other_errors"] > 0
            print(f"\nrestart: the server restarted twice mid-run (down {row['down_s']} s): {row['went_on']} of 4 "
                  f"drivers went on, {row['stopped_typed']} stopped with LedgerUnavailable (then resumed), "
                  f"{row['other_errors']} other errors; checks {'ok' if not row['problems'] else row['problems'][:3]}")
            outage = outage_row(server, _fresh("postgres", server, tmp, next(names)), max(args.rounds, 30))
            failed |= (bool(outage["problems"]) or outage["stopped_typed"] != outage["drivers"]
                       or (outage["gave_up_after_s"] or 1e9) > outage["bound_s"] + 1.0)
            print(f"outage: the server down until every driver stopped, retry_seconds={outage['bound_s']:g}: "
                  f"{outage['stopped_typed']} of {outage['drivers']} drivers stopped with LedgerUnavailable, each "
                  f"at most {outage['gave_up_after_s']} s after the server first failed one of its calls (the "
                  f"last exited {outage['exited_after_stop_s']} s after the stop: a driver finds the server gone "
                  f"at its next ledger call); {outage['resumed_ok']} resumed to the end; checks "
                  f"{'ok' if not outage['problems'] else outage['problems'][:3]}")
            report["restart"] = row
            report["outage"] = outage
    report["failed"] = failed
    write_json(args.json, report)
    print("\nall checks passed" if not failed else "\nA CHECK FAILED (see above)")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
