"""The engines: `evolve()` and `async_evolve()`, and everything that runs a round.

Owns the run's config (`config`), its wiring (`runtime`), the two schedulers (`sync_scheduler`,
`async_scheduler`), the worker step (`worker`), the call runner and pools (`executors`), one
call as it travels (`calls`), held-out and test-set scoring (`evaluation`, `testset`), stop
rules (`stopping`), saving progress (`progress`), counters and the result (`result`). Imports
every layer below it (merge, budget, rewards, ledger and the ground floor); it must not import
the command line, the agents or the providers: a model reaches the engine only through the
`Agent` and `Provider` seams.
"""
