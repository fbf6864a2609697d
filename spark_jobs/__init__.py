"""PySpark jobs that turn the raw sink's at-least-once JSON lines into exactly-once curated tables.

``transforms`` holds the pure ``DataFrame -> DataFrame`` functions (the line checks, ``parse_raw_lines``, in
``rawlines``; the JSON text rules in ``jsontext``); ``compact`` and ``aggregate`` are the
job entry files (arguments and I/O only); ``package`` builds the ``--py-files`` zip for spark-submit.
The jobs depend only on the raw format documented in ``docs/data-format.md``, never on the consumer package.
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
