"""tinybox: the example provider of the mango plugin-author guide.

Each Session's sandbox is a directory on the host and commands are host
processes, so this is **not an isolation boundary**; it shows the provider
contract end to end.
"""

from mango_provider_tinybox.provider import (
    PROVIDER_NAME,
    TinyboxProvider,
    open_conformance_provider,
)
from mango_provider_tinybox.sandbox import TinyboxSandbox

__all__ = ["PROVIDER_NAME", "TinyboxProvider", "TinyboxSandbox", "open_conformance_provider"]
