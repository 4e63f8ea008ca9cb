"""``python -m mango_conformance``: the same as the ``mango-conformance`` command."""

import sys

from mango_conformance.cli import main

sys.exit(main())
