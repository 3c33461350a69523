"""``python -m agentdescent``: the command line (see `agentdescent.cli`)."""

from .cli import main

raise SystemExit(main())
