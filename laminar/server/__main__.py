"""``python -m laminar.server node start ...`` (same as ``laminar node start ...``)."""

import sys

from laminar.server.cli import main

sys.exit(main())
