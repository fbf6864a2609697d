"""``python -m consumer``: see ``consumer.cli``."""

from __future__ import annotations

import sys

try:
    from consumer.cli import main
except KeyboardInterrupt:  # Ctrl-C while Python imports the CLI: as main() says it, not a traceback
    print("interrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
