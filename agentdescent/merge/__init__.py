"""The merge: how concurrent diffs become one commit (the "optimizer").

Owns the `Aggregator` and its config, the `Strategy` seam and the shipped strategies, staleness
policies, governance layers, conflict resolution and fusion, relevance, the evidence pool, the
scoreboard, the noise monitor, the held-out measurement and the paired acceptance test (pure).
Imports the ground floor, `budget` (the allocator it reports outcomes to) and `ledger` (the
commit); it must not import the engine, the agents, the providers or the command line: no model
call sits on the commit path.
"""
