"""The fleet file and its node entry live in ``lockstep_common.fleet_file``: the operator CLI
validates a file with it before asking the inventory to import it, and the inventory
validates each chunk it is sent with the same code (it never trusts the CLI's check)."""

from lockstep_common.fleet_file import FleetFileError, NodeEntry, dumps, parse_fleet

__all__ = ["FleetFileError", "NodeEntry", "dumps", "parse_fleet"]
