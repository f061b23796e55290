"""Lockstep's benchmarks and demo: ``lockstep bench ...`` and ``lockstep demo``.

They stage databases and run the services' code in process, so they live apart from the
operator CLI (lockstep_cli), which reaches the services only over the bus and starts fast
(issue 26, item 3). The CLI loads this package by name when one of its commands is run
(lockstep_cli.main.GROUPS); nothing else imports it (pyproject.toml's import contracts).
"""
