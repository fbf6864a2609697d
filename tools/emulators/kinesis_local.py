"""kinesis-local binds 0.0.0.0 with no host option: a checked copy of its main.js bound to 127.0.0.1."""

from __future__ import annotations

import logging

from tools.emulators.settings import ANY_ADDRESS_ANYWHERE, ANY_ADDRESS_LITERAL, LOOPBACK, EmulatorError

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------ kinesis-local patching


def loopback_main_js(source: bytes) -> bytes:
    """kinesis-local's ``main.js`` with its hard-coded ``"0.0.0.0"`` bind address replaced by 127.0.0.1.

    Raises :class:`EmulatorError` if there is no such literal (a new release changed how it binds) or if a
    wildcard address is still left after the replacement, rather than silently listening on every interface.
    """
    patched, count = ANY_ADDRESS_LITERAL.subn(lambda m: m.group(1) + LOOPBACK.encode() + m.group(1), source)
    if count == 0:
        raise EmulatorError(
            'kinesis-local main.js has no "0.0.0.0" bind-address literal to replace; its release changed, '
            "so it cannot be bound to 127.0.0.1 safely (update tools/emulators/kinesis_local.py)"
        )
    left = ANY_ADDRESS_ANYWHERE.search(patched)
    if left is not None:
        context = patched[max(0, left.start() - 60) : left.end() + 60].decode("utf-8", "replace")
        raise EmulatorError(f"kinesis-local main.js still mentions 0.0.0.0 after patching: ...{context}...")
    logger.debug("kinesis-local main.js: replaced %d bind-address literal(s) with %s", count, LOOPBACK)
    return patched
