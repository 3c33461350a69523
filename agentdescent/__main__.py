"""``python -m agentdescent``: the command line (see `agentdescent.cli.main`)."""

from .cli.main import main

raise SystemExit(main())
