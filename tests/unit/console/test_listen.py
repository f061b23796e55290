"""Where the console may listen (issue 32, "safe by default")."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockstep_console.listen import ListenError, parse, require

pytestmark = pytest.mark.unit
CERT, KEY, TOKEN = Path("c.pem"), Path("k.pem"), Path("token")


@pytest.mark.parametrize("text", ["127.0.0.1:8080", "localhost:1", "[::1]:8443", "127.9.9.9:80"])
def test_loopback_needs_nothing_more(text: str) -> None:
    where = parse(text)
    assert where.loopback
    require(where, None, None, None)


@pytest.mark.parametrize("text", ["0.0.0.0:8080", "10.1.2.3:443", "[::]:8080", "console.lan:8080"])
def test_beyond_loopback_needs_tls_and_a_token_file(text: str) -> None:
    where = parse(text)
    assert not where.loopback
    with pytest.raises(ListenError, match="--tls-cert/--tls-key and --token-file"):
        require(where, None, None, None)
    with pytest.raises(ListenError, match="needs --token-file"):
        require(where, CERT, KEY, None)
    with pytest.raises(ListenError, match="needs --tls-cert/--tls-key"):
        require(where, None, None, TOKEN)
    require(where, CERT, KEY, TOKEN)


def test_a_certificate_without_its_key_is_refused() -> None:
    with pytest.raises(ListenError, match="go together"):
        require(parse("127.0.0.1:8080"), CERT, None, None)


@pytest.mark.parametrize(
    "text", ["8080", ":8080", "host:", "host:0", "host:65536", "host:http", ""]
)
def test_a_bad_address_is_one_line(text: str) -> None:
    with pytest.raises(ListenError, match="--listen"):
        parse(text)
