from collections.abc import Iterator

import pytest

from tests.client.fake_server import FakeCluster


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    fake = FakeCluster(3)
    try:
        yield fake
    finally:
        fake.stop()
