"""Offline reference domains: simulated workloads a run can evolve with no model and no key.

`router` (`RouterDomain`: a keyword router whose rules a simulated proposer writes) and
`valuesim` (a workload that reports token usage, for the budget's A/B). They import the
ground floor and `merge` (the strategies their artifacts use); they must not import the
engine or the command line: a domain hands `evolve` its tasks, reward and callables.
"""
