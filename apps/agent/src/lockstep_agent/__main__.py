"""``python -m lockstep_agent``: the same as ``lockstep-agent``."""

from lockstep_agent.cli import main

main()
