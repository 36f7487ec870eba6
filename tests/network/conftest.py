import pytest

from tests.network.hosts import netns_unavailable_reason


@pytest.fixture(scope="session")
def netns_ok():
    """Skips a test when this machine cannot make network namespaces (not root, no `ip` or
    `nft`, no kernel support), naming why."""
    reason = netns_unavailable_reason()
    if reason:
        pytest.skip(reason)
