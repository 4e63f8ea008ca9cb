"""ExposedPort: a URL without credentials, headers that never show in a repr."""

from __future__ import annotations

import pytest

from mango.provider import ExposedPort, InvalidInput, check_port


def test_the_headers_are_kept_but_never_shown() -> None:
    """repr names the headers without their values; str is the URL."""
    exposed = ExposedPort("https://3000-abc.proxy.example", {"X-Preview-Token": "s3cret"})
    assert exposed.headers["X-Preview-Token"] == "s3cret"
    assert "s3cret" not in repr(exposed)
    assert "X-Preview-Token" in repr(exposed)
    assert str(exposed) == "https://3000-abc.proxy.example"


def test_the_headers_cannot_be_changed_afterwards() -> None:
    """The value is frozen, its headers too (a caller's dict is copied)."""
    given = {"A": "1"}
    exposed = ExposedPort("http://127.0.0.1:8080", given)
    given["A"] = "2"
    assert exposed.headers["A"] == "1"
    with pytest.raises(TypeError):
        exposed.headers["A"] = "3"  # type: ignore[index]
    assert exposed == ExposedPort("http://127.0.0.1:8080", {"A": "1"})
    assert hash(exposed) == hash(ExposedPort("http://127.0.0.1:8080", {"A": "2"}))


@pytest.mark.parametrize(
    "url",
    ["ftp://host/x", "127.0.0.1:8080", "http://", "http://user:pass@host:1", "http://tok@host"],
)
def test_a_url_that_is_not_plain_http_is_refused(url: str) -> None:
    """Only an absolute http(s) URL with no user info in it is an exposed port's URL."""
    with pytest.raises(ValueError, match="exposed port"):
        ExposedPort(url)


def test_headers_must_be_strings() -> None:
    """A header value that is not a string is refused when the value is made."""
    with pytest.raises(TypeError):
        ExposedPort("http://127.0.0.1:1", {"A": 1})  # type: ignore[dict-item]


@pytest.mark.parametrize("port", [0, 65536, -1, True, "80", 80.0])
def test_check_port_refuses_what_is_not_a_tcp_port(port: object) -> None:
    """check_port: 1 to 65535, an int and not a bool, else InvalidInput."""
    with pytest.raises(InvalidInput):
        check_port(port)


def test_check_port_returns_a_valid_port() -> None:
    """The bounds are inclusive."""
    assert check_port(1) == 1
    assert check_port(65535) == 65535
