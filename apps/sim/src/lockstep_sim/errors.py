"""DSP0266 section "Error responses": ``{"error": {code, message, @Message.ExtendedInfo}}``.

Message ids come from the DMTF ``Base.1.19.0`` and ``Update.1.3.0`` registries.
"""

from __future__ import annotations

from typing import Any

BASE = "Base.1.19.0"
UPDATE = "Update.1.3.0"

# (MessageId suffix) -> (Severity, Resolution)
_MESSAGES: dict[str, tuple[str, str]] = {
    "GeneralError": ("Critical", "None."),
    "ResourceNotFound": ("Critical", "Provide a valid resource identifier and resubmit."),
    "ResourceMissingAtURI": ("Critical", "Place a valid resource at the URI or correct it."),
    "NoValidSession": ("Critical", "Establish a session before attempting any operations."),
    "InsufficientPrivilege": ("Critical", "Either abandon the operation or change privileges."),
    "OperationNotAllowed": ("Critical", "None."),
    "PreconditionFailed": ("Critical", "Try the operation again using the appropriate ETag."),
    "PreconditionRequired": ("Critical", "Try the operation again using an If-Match header."),
    "MalformedJSON": ("Critical", "Ensure that the request body is valid JSON and resubmit."),
    "PropertyNotWritable": ("Warning", "Remove the property from the request and resubmit."),
    "QueryNotSupported": ("Warning", "Remove the query parameter and resubmit."),
    "PropertyValueNotInList": ("Warning", "Choose a value from the enumeration list."),
    "PropertyMissing": ("Warning", "Supply the property and resubmit."),
    "PropertyUnknown": ("Warning", "Remove the unknown property and resubmit."),
    "PropertyValueTypeError": ("Warning", "Correct the value for the property and resubmit."),
    "ActionParameterMissing": ("Critical", "Supply the action with the required parameter."),
    "ActionParameterValueError": ("Warning", "Correct the value for the parameter and retry."),
    "ActionParameterNotSupported": ("Warning", "Remove the parameter and resubmit."),
    "ResourceAlreadyExists": ("Critical", "Do not repeat the create operation."),
    "ServiceTemporarilyUnavailable": ("Critical", "Wait for the indicated retry duration."),
    "UpdateNotApplicable": ("Warning", "None."),
    "VerificationFailed": ("Critical", "Check the image and resubmit."),
    "NoTargetsDetermined": ("Critical", "Verify that the image is valid for the targets."),
    "UpdateSuccessful": ("OK", "None."),
    "UpdateInProgress": ("OK", "None."),
    "TransferringToComponent": ("OK", "None."),
    "InstallingOnComponent": ("OK", "None."),
    "AwaitToActivate": ("OK", "Activate the staged image to complete the update."),
    "ActivateFailed": ("Critical", "None."),
    "ApplyFailed": ("Critical", "None."),
    "TargetDetermined": ("OK", "None."),
    "Success": ("OK", "None."),
}
_UPDATE_IDS = {
    "UpdateNotApplicable",
    "VerificationFailed",
    "NoTargetsDetermined",
    "UpdateSuccessful",
    "UpdateInProgress",
    "TransferringToComponent",
    "InstallingOnComponent",
    "AwaitToActivate",
    "ActivateFailed",
    "ApplyFailed",
    "TargetDetermined",
}


def message(name: str, text: str, args: tuple[str, ...] = ()) -> dict[str, Any]:
    """One Message (Message v1_1_2) from the Base or Update registry."""
    severity, resolution = _MESSAGES[name]
    registry = UPDATE if name in _UPDATE_IDS else BASE
    return {
        "@odata.type": "#Message.v1_1_2.Message",
        "MessageId": f"{registry}.{name}",
        "Message": text,
        "MessageArgs": list(args),
        "MessageSeverity": severity,
        "Resolution": resolution,
    }


class RedfishError(Exception):
    """Raised by resource code, turned into an error response by the server."""

    def __init__(
        self,
        status: int,
        name: str,
        text: str,
        args: tuple[str, ...] = (),
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(text)
        self.status = status
        self.name = name
        self.text = text
        self.args_ = args
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return error_body(self.name, self.text, self.args_)


def error_body(name: str, text: str, args: tuple[str, ...] = ()) -> dict[str, Any]:
    """The DSP0266 error response document."""
    info = message(name, text, args)
    return {
        "error": {
            "code": info["MessageId"],
            "message": text,
            "@Message.ExtendedInfo": [info],
        }
    }


def not_found(path: str) -> RedfishError:
    return RedfishError(
        404, "ResourceNotFound", f"The requested resource at {path} was not found.", (path,)
    )


def bad_request(name: str, text: str, *args: str) -> RedfishError:
    return RedfishError(400, name, text, args)
