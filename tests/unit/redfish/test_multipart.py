"""The multipart/form-data body of a push (RFC 7578), read back with the standard parser."""

from __future__ import annotations

import email
import email.policy
import hashlib
import json

import pytest

from lockstep_redfish.errors import ImageDigestMismatch
from lockstep_redfish.image import FirmwareImage
from lockstep_redfish.multipart import multipart_body

pytestmark = pytest.mark.unit
PARAMETERS = {"Targets": ["/redfish/v1/UpdateService/FirmwareInventory/HGX_FW_GPU_0"]}


def test_two_parts_parameters_then_the_image_byte_for_byte() -> None:
    image = bytes(range(256)) * 40 + b"\r\n--"
    body = multipart_body(PARAMETERS, image, 'gpu "new".fwpkg\r\nX-Evil: 1')
    boundary = body.content_type.split("boundary=")[1]
    assert boundary.encode() not in image
    message = email.message_from_bytes(
        f"Content-Type: {body.content_type}\r\n\r\n".encode() + b"".join(body.pieces),
        policy=email.policy.HTTP,
    )
    parameters, update_file = message.iter_parts()
    assert parameters.get_param("name", header="content-disposition") == "UpdateParameters"
    assert parameters.get_content_type() == "application/json"
    payload = parameters.get_payload(decode=True)
    assert isinstance(payload, bytes) and json.loads(payload) == PARAMETERS
    assert update_file.get_param("name", header="content-disposition") == "UpdateFile"
    assert update_file.get_filename() == "gpu__new_.fwpkg__X-Evil__1"  # cannot break a header
    assert update_file.get_content_type() == "application/octet-stream"
    assert update_file.get_payload(decode=True) == image
    assert body.pieces[1] is body.image is image  # the image's own object goes on the wire


def test_a_mutable_image_is_frozen_once_so_what_is_hashed_is_what_is_sent() -> None:
    image = bytearray(b"firmware")
    body = multipart_body(PARAMETERS, image, "fw.bin")  # type: ignore[arg-type]
    image[0:1] = b"X"
    assert body.image == b"firmware" and type(body.image) is bytes


def test_an_image_is_checked_against_its_digest() -> None:
    data = b"firmware"
    image = FirmwareImage(data, hashlib.sha384(data).hexdigest(), "fw.bin")
    image.check()
    image.check(memoryview(b"xx" + data)[2:])
    with pytest.raises(ImageDigestMismatch, match=r"fw\.bin: SHA-384 .* is not the expected"):
        image.check(b"firmwarE")
    assert "firmware" not in repr(image) and "8 bytes, sha384=" in repr(image)
    with pytest.raises(ValueError, match="SHA-384 digest must be 96 lower-case hex"):
        FirmwareImage(data, hashlib.sha384(data).hexdigest().upper())
    with pytest.raises(ValueError, match="SHA-384 digest must be 96 lower-case hex"):
        FirmwareImage(data, hashlib.sha256(data).hexdigest())  # another algorithm's digest


def test_a_sha256_digest_is_checked_as_sha256_when_named() -> None:
    data = b"firmware"
    image = FirmwareImage(data, hashlib.sha256(data).hexdigest(), "fw.bin", algorithm="sha256")
    image.check()
    with pytest.raises(ImageDigestMismatch, match=r"fw\.bin: SHA-256 .* is not the expected"):
        image.check(b"firmwarE")
    with pytest.raises(ValueError, match="SHA-256 digest must be 64 lower-case hex"):
        FirmwareImage(data, hashlib.sha384(data).hexdigest(), algorithm="sha256")
    with pytest.raises(ValueError, match="digest algorithm must be one of sha256, sha384"):
        FirmwareImage(data, "0" * 32, algorithm="md5")  # type: ignore[arg-type]
