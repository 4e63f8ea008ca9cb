"""``python -m mango.embedded.reaper DATA_DIR IDLE TIMEOUT``: see :mod:`mango.embedded._reaper`.

A module of its own so that ``-m`` does not run a module the package has
already imported.
"""

from __future__ import annotations

import sys

from mango.embedded._reaper import main

if __name__ == "__main__":
    sys.exit(main())
