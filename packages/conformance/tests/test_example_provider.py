"""The plugin-author guide's example provider (docs/example-provider) passes the suite."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]


def test_example_provider_passes_the_whole_suite(
    suite_pytester: pytest.Pytester, example_src: Path
) -> None:
    """The example's own test module, run unchanged, passes every check."""
    suite_pytester.syspathinsert(example_src)
    shutil.copy(example_src.parent / "tests" / "test_conformance.py", suite_pytester.path)
    result = suite_pytester.runpytest(
        "--mango-profile=offline-ci", "--mango-max-examples=30", "--mango-steps=30"
    )
    result.assert_outcomes(passed=52, skipped=43)


def test_example_plugin_registers_provider_and_target(
    monkeypatch: pytest.MonkeyPatch, example_src: Path, tmp_path: Path
) -> None:
    """The example's hookimpls add a registration and an offline target."""
    monkeypatch.syspath_prepend(str(example_src))
    from mango.domain.registry import ProviderContext
    from mango.plugins import load_plugins

    plugin = pytest.importorskip("mango_provider_tinybox.plugin")
    host = load_plugins(entry_points=False, extra=[plugin])
    assert host.providers().names() == ("local", "tinybox")
    assert host.providers().capabilities("tinybox").names() == ()
    assert host.conformance_targets().get("tinybox").provider == "tinybox"
    context = ProviderContext(namespace="ns-test", environ={"TINYBOX_DIR": str(tmp_path)})
    monkeypatch.setenv("TINYBOX_DIR", "relative/so/reading/os.environ/would/fail")
    provider = host.providers().open("tinybox", context)
    assert provider.name == "tinybox"
    assert provider.base_dir == tmp_path  # type: ignore[attr-defined]
    for name in [module for module in sys.modules if module.startswith("mango_provider_tinybox")]:
        monkeypatch.delitem(sys.modules, name)
