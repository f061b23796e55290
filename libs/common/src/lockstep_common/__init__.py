"""Lockstep's shared library: what every service speaks and stands on.

Event models, the CloudEvents envelope, subject builders, the error hierarchy that decides
acking, the transactional outbox and inbox, the JetStream consumer runtime, settings,
observability and the service bootstrap. Nothing here does I/O at import time.
"""
