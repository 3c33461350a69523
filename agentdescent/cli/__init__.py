"""The command line (`agentdescent`, `python -m agentdescent`): run directories and their views.

Owns the flags (`parser`, their defaults the engines' config's), the `init` / `run` /
`resume` commands (`main`), the run directory's files (`rundir`), the one check of each
spec value (`specvalues`), the checksums of a run's inputs (`runinputs`), the one-driver
lock (`runlock`), where the run's ledger lives and the one place it is opened (`runledger`), the signals that stop a command (`signals`: SIGTERM, SIGHUP, SIGQUIT wind a
run down as Ctrl-C does), a spec turned into a run (`runspec`), code runs (`runtree`), the read-only
commands (`runviews`), `plan`, the report, `explain` and the demo.
It is the top layer: it may import every package below; nothing in the package imports it.
"""

from .main import (
    main,
)

__all__ = [
    "main",
]
