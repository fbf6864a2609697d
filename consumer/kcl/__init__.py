"""Coming from the KCL: reading its lease table and the cut-over (``python -m consumer import-kcl``)."""
