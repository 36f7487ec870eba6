import pytest

from tests.broker_process import BrokerProcess, release_all_shm


@pytest.fixture(scope="session", autouse=True)
def _release_brokers_shared_memory():
    """At the end of the session, the shared memory of the brokers tests SIGKILLed."""
    yield
    release_all_shm()


@pytest.fixture
def broker(tmp_path):
    """A fresh standalone broker on a free port, stopped (and its workers killed) afterwards."""
    with BrokerProcess(tmp_path) as b:
        yield b


@pytest.fixture
def broker_factory(tmp_path):
    """Make brokers with custom settings; every one is stopped at the end of the test."""
    made = []

    def make(**kw) -> BrokerProcess:
        b = BrokerProcess(tmp_path, **kw)
        made.append(b)
        return b

    yield make
    for b in made:
        try:
            b.stop()
        except Exception:
            pass
        finally:
            b.kill()
