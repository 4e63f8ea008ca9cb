"""The allowlist host rule and the deployment's package-manager hosts."""

from __future__ import annotations

import pytest

from mango.config import PACKAGE_MANAGER_HOSTS_ENV, Settings, package_manager_hosts
from mango.domain import ConfigurationError, InvalidInput, NetworkMode, SandboxSpec
from mango.domain.values import validate_host

GOOD = [
    "example.test",
    "pkgs.example.test",
    "*.example.test",
    "a",
    "xn--bcher-kva.example",
    "10.0.0.1",
    "a-b.c-d.example",
    "A.Example.TEST",
    "x" * 63 + ".example",
]
BAD = [
    "",
    " example.test",
    "example.test ",
    "https://example.test",
    "example.test:443",
    "example.test/path",
    "user@example.test",
    "[::1]",
    "::1",
    "-a.example",
    "a-.example",
    "a..example",
    ".example",
    "example.",
    "*example.test",
    "a.*.example",
    "a_b.example",
    "x" * 64 + ".example",
    ("a" * 60 + ".") * 5 + "ab",
    "exa mple.test",
    "#frag",
    "a?b",
]


@pytest.mark.parametrize("host", GOOD)
def test_good_hosts_pass(host: str) -> None:
    """Host names, '*.' wildcards and IPv4 literals are accepted as given."""
    assert validate_host(host) == host


@pytest.mark.parametrize("host", BAD)
def test_bad_hosts_are_invalid_input(host: str) -> None:
    """URLs, ports, IPv6, bad labels, spaces and overlong names are refused."""
    with pytest.raises(InvalidInput):
        validate_host(host)


def test_spec_allowlists_are_validated_and_normalised() -> None:
    """A spec refuses a bad host at construction and lower-cases and sorts good ones."""
    spec = SandboxSpec(
        network=NetworkMode.LIMITED, network_allowed_hosts=["B.example.test", "*.a.example.test"]
    )
    assert spec.network_allowed_hosts == ("*.a.example.test", "b.example.test")
    for field in ("network_allowed_hosts", "setup_network_allowed_hosts"):
        with pytest.raises(InvalidInput):
            SandboxSpec(network=NetworkMode.LIMITED, **{field: ["example.test:80"]})


def test_package_manager_hosts_setting() -> None:
    """Comma or space separated, validated, normalised; a bad entry names the variable."""
    assert package_manager_hosts({}) == ()
    listed = " Pkgs.example.test, *.mirror.example.test  pkgs.example.test"
    env = {PACKAGE_MANAGER_HOSTS_ENV: listed}
    assert package_manager_hosts(env) == ("*.mirror.example.test", "pkgs.example.test")
    assert Settings.from_env(env).package_manager_hosts == package_manager_hosts(env)
    with pytest.raises(ConfigurationError, match=PACKAGE_MANAGER_HOSTS_ENV):
        package_manager_hosts({PACKAGE_MANAGER_HOSTS_ENV: "https://pkgs.example.test/simple"})
