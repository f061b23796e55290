"""Lockstep's Redfish client: what any service talking to BMCs shares.

Sessions (:class:`RedfishClient`, :class:`BmcSession`, :class:`BmcTarget`), HTTP with bounded
retries (:class:`RetryPolicy`, :class:`Reply`), resource models (``models``), credential
sources (``credentials``) and errors placed in Lockstep's error hierarchy (``errors``).
Nothing here does I/O at import time, and nothing imports a service.
"""

from lockstep_redfish.credentials import (
    CredentialSource,
    EnvCredentials,
    FileCredentials,
    RegistryCredentials,
)
from lockstep_redfish.errors import (
    BmcError,
    BmcRefused,
    BmcUnavailable,
    CredentialError,
    PlainHttpRefused,
    RedfishReplyError,
)
from lockstep_redfish.session import BmcSession, BmcTarget, RedfishClient
from lockstep_redfish.transport import Reply, RetryPolicy

__all__ = [
    "BmcError",
    "BmcRefused",
    "BmcSession",
    "BmcTarget",
    "BmcUnavailable",
    "CredentialError",
    "CredentialSource",
    "EnvCredentials",
    "FileCredentials",
    "PlainHttpRefused",
    "RedfishClient",
    "RedfishReplyError",
    "RegistryCredentials",
    "Reply",
    "RetryPolicy",
]
