"""Example processors: a logging one and an epoch-fenced stream-to-stream copier."""
