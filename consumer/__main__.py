"""``python -m consumer``: see ``consumer.cli``."""

from __future__ import annotations

import sys

from consumer.cli import main

sys.exit(main())
