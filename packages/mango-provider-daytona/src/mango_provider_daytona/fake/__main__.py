"""``python -m mango_provider_daytona.fake [SCRATCH]``: serve a fake Daytona until SIGTERM.

Prints its URL on the first line; the key is
:data:`~mango_provider_daytona.fake.FAKE_API_KEY`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mango.fakes import FakeService, run_standalone
from mango_provider_daytona.fake.server import DaytonaFake
from mango_provider_daytona.fake.state import FAKE_MAX_OUTPUT_BYTES


def main() -> None:
    """Serve a fake Daytona with its sandboxes under ``SCRATCH`` (default: a temporary one)."""

    def build(scratch: Path) -> FakeService:
        fake = DaytonaFake()
        return FakeService(
            scratch, fake.routes, name="daytona", max_output_bytes=FAKE_MAX_OUTPUT_BYTES
        )

    run_standalone(build, sys.argv[1] if len(sys.argv) > 1 else None, prefix="mango-daytona-fake-")


if __name__ == "__main__":
    main()
