"""``python -m telemetry``: the same command as the ``telemetry`` console script."""

import sys

from .cli import main

sys.exit(main())
