"""Lockstep's Redfish client: what any service talking to BMCs shares.

Sessions (:class:`RedfishClient`, :class:`BmcSession`, :class:`BmcTarget`), HTTP with bounded
retries (:class:`RetryPolicy`, :class:`Reply`), resource models (``models``), credential
sources (``credentials``) and errors placed in Lockstep's error hierarchy (``errors``).

The write side: :class:`FirmwareUpdate` (``update``: push, follow the task, activate, reset,
read back) for a :class:`FirmwareImage` and an :class:`UpdateRequest`, within an
:class:`UpdatePolicy` / :class:`TaskPolicy`; the pure decisions it rests on are in
``preflight`` and ``readback`` (versions ordered by ``lockstep_common.versions``);
:class:`ImageServer` serves ``SimpleUpdate``.
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
    BmcUntrusted,
    CredentialError,
    ImageDigestMismatch,
    NotVerified,
    PlainHttpRefused,
    PushOutcomeUnknown,
    RedfishReplyError,
    ResourceChanged,
    TaskDeadlineExceeded,
    TaskFailed,
    TaskUnreachable,
    UpdateRefused,
)
from lockstep_redfish.image import FirmwareImage
from lockstep_redfish.image_server import ImageServer
from lockstep_redfish.preflight import UpdateRequest
from lockstep_redfish.session import BmcSession, BmcTarget, RedfishClient
from lockstep_redfish.tasks import TaskOutcome, TaskPolicy, TaskRef
from lockstep_redfish.transport import Reply, RetryPolicy
from lockstep_redfish.update import FirmwareUpdate, UpdatePolicy, UpdateResult

__all__ = [
    "BmcError",
    "BmcRefused",
    "BmcSession",
    "BmcTarget",
    "BmcUnavailable",
    "BmcUntrusted",
    "CredentialError",
    "CredentialSource",
    "EnvCredentials",
    "FileCredentials",
    "FirmwareImage",
    "FirmwareUpdate",
    "ImageDigestMismatch",
    "ImageServer",
    "NotVerified",
    "PlainHttpRefused",
    "PushOutcomeUnknown",
    "RedfishClient",
    "RedfishReplyError",
    "RegistryCredentials",
    "Reply",
    "ResourceChanged",
    "RetryPolicy",
    "TaskDeadlineExceeded",
    "TaskFailed",
    "TaskOutcome",
    "TaskPolicy",
    "TaskRef",
    "TaskUnreachable",
    "UpdatePolicy",
    "UpdateRefused",
    "UpdateRequest",
    "UpdateResult",
]
