"""tinybox: the example provider of the mango plugin-author guide.

Each Session's sandbox is a directory on the host and commands are host
processes, so this is **not an isolation boundary**; it exists to show the
provider contract end to end in a few hundred lines.
"""

from mango_provider_tinybox.provider import (
    DEFAULT_MAX_OUTPUT_BYTES,
    PROVIDER_NAME,
    TinyboxProvider,
    TinyboxSandbox,
    open_conformance_provider,
)

__all__ = [
    "DEFAULT_MAX_OUTPUT_BYTES",
    "PROVIDER_NAME",
    "TinyboxProvider",
    "TinyboxSandbox",
    "open_conformance_provider",
]
