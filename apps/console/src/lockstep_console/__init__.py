"""The rollout console (issue 32): read-only web pages over the services' query API."""
