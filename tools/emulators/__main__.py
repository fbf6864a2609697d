"""``python -m tools.emulators [--format env]``: run both emulators until Ctrl-C or SIGTERM."""

from __future__ import annotations

import sys

from tools.emulators.cli import main

sys.exit(main())
