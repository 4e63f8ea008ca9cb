"""Environments, profiles and admission: every reason at once, nothing written on refusal."""

from __future__ import annotations

from pathlib import Path

import pytest

from mango.app import InMemoryBindingStore, SessionManager
from mango.app.admission import admit_environment
from mango.app.profiles import BUILTIN_PROFILES, environment_fields, load_profiles, parse_profiles
from mango.config import Settings
from mango.domain import (
    AdmissionRejected,
    Capability,
    CapabilityNotSupported,
    CapabilitySet,
    ConfigurationError,
    InvalidInput,
    PackagePlan,
    SandboxSpec,
)
from mango.domain.environments import merge_fields, parse_package, spec_from_fields
from mango.domain.values import NetworkMode
from mango.local import LocalProvider
from mango.runtime import resolve_spec

DOCKER = CapabilitySet.of(Capability.PACKAGE_SETUP)


def test_every_reason_is_listed_at_once() -> None:
    """Packages on local, limited network, an allowlist without limited, a bad host, mounts."""
    with pytest.raises(CapabilityNotSupported) as caught:
        admit_environment(
            "local",
            CapabilitySet(),
            {
                "network": "limited",
                "network_allowed_hosts": ["ok.example", "not a host", "http://x.example/"],
                "packages": {"pip": ["requests==2.32.3"]},
            },
            [Capability.FILE_RESOURCES],
        )
    reasons = caught.value.reasons
    assert reasons == (
        (
            "network_allowed_hosts: allowlist host 'not a host' is not a host name: labels "
            "are 1-63 letters, digits or '-', not starting or ending with '-'"
        ),
        (
            "network_allowed_hosts: allowlist host 'http://x.example/' must be a bare host name, "
            "'*.' wildcard or IPv4 address (no scheme, port, path, user or IPv6 literal)"
        ),
        "local does not support package installation",
        "local does not support limited networking",
        "local does not support file resource mounts",
    )
    assert caught.value.provider == "local"
    assert caught.value.hint


def test_an_allowlist_without_limited_network_is_rejected_even_if_every_host_is_bad() -> None:
    """The allowlist was asked for: its network must be limited, whatever its hosts were."""
    with pytest.raises(AdmissionRejected) as caught:
        admit_environment(
            "docker", DOCKER, {"network": "bridge", "network_allowed_hosts": ["bad host"]}
        )
    assert not isinstance(caught.value, CapabilityNotSupported)
    assert caught.value.reasons[-1] == "network allowlists need network 'limited', not 'bridge'"
    with pytest.raises(AdmissionRejected, match="need network 'limited', not 'none'"):
        admit_environment("docker", DOCKER, {"network_allowed_hosts": ["ok.example"]})


def test_docker_admits_packages_but_not_limited_networking() -> None:
    """package-setup is declared, limited-network is not."""
    spec = admit_environment("docker", DOCKER, {"packages": {"apt": ["jq"]}, "timeout": 120})
    assert spec == SandboxSpec(timeout=120, packages=PackagePlan(apt=["jq"]))
    with pytest.raises(CapabilityNotSupported, match="docker does not support limited networking"):
        admit_environment("docker", DOCKER, {"network": "limited", "packages": {"apt": ["jq"]}})


def test_field_problems_are_each_named() -> None:
    """Unknown keys, bad values, unknown managers and wrong shapes: one problem each."""
    spec, problems = spec_from_fields(
        {
            "timeout": -1,
            "network": "wifi",
            "memory": "lots",
            "colour": "blue",
            "packages": {"brew": ["x"], "pip": "requests", "apt": ["jq"]},
        }
    )
    assert spec == SandboxSpec(packages=PackagePlan(apt=["jq"]))
    assert len(problems) == 6, problems
    assert problems[0].startswith("unknown environment keys ['colour']")
    assert [p.split(":")[0] for p in problems[1:4]] == ["timeout", "memory", "network"]
    assert "unknown package manager 'brew'" in problems[4]
    assert problems[5] == "pip must be a list of strings, got str"


def test_a_valid_spec_passes_unchanged() -> None:
    """A built SandboxSpec is admitted as it is."""
    spec = SandboxSpec(network=NetworkMode.BRIDGE, packages=PackagePlan(pip=["attrs"]))
    assert admit_environment("docker", DOCKER, spec) is spec


def test_package_texts() -> None:
    """MANAGER:NAME, the name verbatim after the first colon; anything else is refused."""
    assert parse_package("pip:requests==2.32.3") == ("pip", "requests==2.32.3")
    assert parse_package("apt:libfoo:amd64") == ("apt", "libfoo:amd64")
    assert parse_package("npm:; touch /tmp/x") == ("npm", "; touch /tmp/x")
    for text in ("requests", "pip:", "brew:wget", ":x"):
        with pytest.raises(InvalidInput):
            parse_package(text)


def test_profiles_merge_in_order_and_join_package_lists() -> None:
    """defaults < profile < overrides < --package; package lists are joined per manager."""
    profiles = parse_profiles(
        '[profiles.data]\ntimeout = 60\nnetwork = "bridge"\n'
        '[profiles.data.packages]\napt = ["jq"]\n',
        "test.toml",
    )
    fields = environment_fields(
        profiles,
        "data",
        defaults={"timeout": 5, "image": "img"},
        packages=["apt:curl", "pip:attrs"],
        overrides={"network": "none"},
    )
    assert fields == {
        "timeout": 60,
        "image": "img",
        "network": "none",
        "packages": {"apt": ["jq", "curl"], "pip": ["attrs"]},
    }
    assert merge_fields({"packages": {"apt": ["a"]}}, {"packages": {"apt": ["b"]}}) == {
        "packages": {"apt": ["a", "b"]}
    }


def test_the_builtin_cloud_profile_and_its_replacement() -> None:
    """cloud is the seed's defaults (120 s, bridge); a file's [profiles.cloud] replaces it."""
    assert dict(BUILTIN_PROFILES["cloud"]) == {"timeout": 120, "network": "bridge"}
    assert spec_from_fields(load_profiles(None).fields("cloud")) == (
        SandboxSpec(timeout=120, network=NetworkMode.BRIDGE),
        (),
    )
    replaced = parse_profiles("[profiles.cloud]\ntimeout = 30\n", "f.toml")
    assert replaced.fields("cloud") == {"timeout": 30}
    with pytest.raises(InvalidInput, match=r"no environment profile 'gpu' in f.toml \(profiles: "):
        replaced.fields("gpu")


def test_a_malformed_profiles_file_is_a_configuration_error(tmp_path: Path) -> None:
    """Bad TOML, an unknown table, a missing file: each names the file."""
    for text, match in (
        ("[profiles.x\n", "is not valid TOML"),
        ("[other]\n", r"unknown tables \['other'\]"),
        ("profiles = 3\n", "must be a table"),
    ):
        with pytest.raises(ConfigurationError, match=match):
            parse_profiles(text, "p.toml")
    with pytest.raises(ConfigurationError, match="cannot read the profiles file"):
        load_profiles(tmp_path / "missing.toml")
    with pytest.raises(ConfigurationError, match="MANGO_PROFILES_FILE must be an absolute path"):
        Settings.from_env({"MANGO_PROFILES_FILE": "relative.toml"})


def test_resolve_spec_reads_the_registration_only(tmp_path: Path) -> None:
    """The API's resolve_spec admits for MANGO_SANDBOX by its registration; a file profile."""
    profiles = tmp_path / "profiles.toml"
    profiles.write_text('[profiles.tools]\nnetwork = "bridge"\npackages = { apt = ["jq"] }\n')
    env = {
        "MANGO_STATE_DIR": str(tmp_path),
        "MANGO_PROFILES_FILE": str(profiles),
        "MANGO_SANDBOX": "docker",
        # A provider that is never opened cannot fail on its settings.
        "MANGO_SANDBOX_MEMORY": "not-a-size",
    }
    spec = resolve_spec(Settings.from_env(env), "tools", packages=["pip:attrs"])
    assert spec.packages == PackagePlan(apt=["jq"], pip=["attrs"])
    assert spec.network is NetworkMode.BRIDGE
    with pytest.raises(CapabilityNotSupported, match="local does not support package installation"):
        resolve_spec(Settings.from_env({**env, "MANGO_SANDBOX": "local"}), "tools")


async def test_ensure_session_with_a_refused_spec_writes_nothing(tmp_path: Path) -> None:
    """The Python API: admission before the Session row."""
    store = InMemoryBindingStore()
    manager = SessionManager(LocalProvider(tmp_path / "sandboxes"), store)
    with pytest.raises(CapabilityNotSupported):
        await manager.ensure_session("s1", SandboxSpec(packages=PackagePlan(pip=["attrs"])))
    assert await store.get_session("s1") is None
    await manager.ensure_session("s1", SandboxSpec())
    assert await store.get_session("s1") is not None
