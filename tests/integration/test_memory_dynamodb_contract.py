"""The repository contract cases, run against ``DynamoDBLeaseRepository`` on the in-memory DynamoDB client.

The same cases run against moto over HTTP in ``test_repository_contract``; passing here shows the in-memory
client (which the coordination simulator bills) behaves like DynamoDB for every request the project's
repository and checkpoint store make.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.integration import test_repository_contract as contract
from tests.integration.contract_support import Backend, dynamodb_backend
from tools.coordination.ledger import Ledger
from tools.coordination.memory_client import InMemoryDynamoDB

# Every contract case, collected again in this module with the fixture below.
globals().update({name: fn for name, fn in vars(contract).items() if name.startswith("test_")})


@pytest.fixture
def b(unique_name: Callable[..., str]) -> Backend:
    client = InMemoryDynamoDB(Ledger(time.monotonic))
    backend = dynamodb_backend(client, unique_name("leases"), unique_name("cps"))
    backend.name = "memory-client"
    return backend
