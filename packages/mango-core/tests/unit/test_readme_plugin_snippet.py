"""The plugin snippet of mango-core's README registers a provider that opens, as written."""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from mango.local import LocalProvider
from mango.provider import CapabilitySet, ProviderContext, ProviderRegistry

README = Path(__file__).resolve().parents[2] / "README.md"


def plugin_snippet() -> str:
    """The Python block of the README's "Plugins" section."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("\n## Plugins\n") :]
    section = section[: section.index("\n## ", 1)]
    (code,) = re.findall(r"^```python\n(.*?)^```$", section, re.MULTILINE | re.DOTALL)
    return code


class MyProvider(LocalProvider):
    """A stand-in for the reader's provider: a local provider named ``mine``."""

    @property
    def name(self) -> str:
        """The registered name."""
        return "mine"

    @property
    def capabilities(self) -> CapabilitySet:
        """What the snippet registers: none (the local provider's capabilities are left out)."""
        return CapabilitySet()

    @classmethod
    def from_settings(cls, environ: dict[str, str], *, namespace: str) -> MyProvider:
        """As the snippet calls it: settings from the context's environment."""
        return cls(environ["MINE_DIR"], namespace=namespace)


@pytest.fixture
def mine_package() -> Iterator[None]:
    """``mango_provider_mine.provider.MyProvider``, the module the snippet imports lazily."""
    package = types.ModuleType("mango_provider_mine")
    module = types.ModuleType("mango_provider_mine.provider")
    module.MyProvider = MyProvider  # type: ignore[attr-defined]
    package.provider = module  # type: ignore[attr-defined]
    sys.modules.update({package.__name__: package, module.__name__: module})
    try:
        yield
    finally:
        for name in (package.__name__, module.__name__):
            sys.modules.pop(name, None)


def test_the_readme_plugin_registers_and_opens(mine_package: None, tmp_path: Path) -> None:
    """Its hook adds a registration whose factory takes a ProviderContext and opens ``mine``."""
    namespace: dict[str, object] = {}
    exec(compile(plugin_snippet(), str(README), "exec"), namespace)  # noqa: S102 - the snippet
    registry = ProviderRegistry()
    namespace["mango_register_providers"](registry)  # type: ignore[operator]
    assert registry.names() == ("mine",)
    context = ProviderContext(namespace="ns-readme", environ={"MINE_DIR": str(tmp_path)})
    provider = registry.open("mine", context)
    assert provider.name == "mine"
    assert provider.base_dir == tmp_path  # type: ignore[attr-defined]
