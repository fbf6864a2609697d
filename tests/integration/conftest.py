"""Fixtures shared by the integration tests (the emulators themselves are started in tests/conftest.py)."""

from __future__ import annotations

from tests.integration.contract_support import b

__all__ = ["b"]  # each repository contract case, on the in-memory fakes and on DynamoDB over HTTP
