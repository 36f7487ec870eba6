import pytest

from tests.broker_process import BrokerProcess, release_all_shm
from tests.cluster.zk import ZooKeeperServer


@pytest.fixture(scope="session", autouse=True)
def _release_brokers_shared_memory():
    """At the end of the session, the shared memory of the brokers tests SIGKILLed."""
    yield
    release_all_shm()


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory):
    """One real ZooKeeper for the whole session (per xdist worker); tests isolate themselves by
    chroot."""
    with ZooKeeperServer(tmp_path_factory.mktemp("zk")) as server:
        yield server


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


# The README's test command runs the suite on two pytest-xdist workers (`-n 2`): the suite mostly
# waits on the processes it starts (brokers, ZooKeeper, JVMs), about one CPU busy of the two.
# Each module is one unit of work, so its module fixtures (a 3-broker cluster, a stream) are
# made once and its tests run in their order; the Spark modules are one unit, so one Spark
# session and standalone cluster serve them all. The longest units go first, longest first: a
# worker takes the next unit in this order whenever it runs low, so a long unit started last
# would run alone at the end while the other worker idles; started first, the short modules
# fill in behind it. The Spark unit leads, the network nemeses follow (as before), then the
# other modules that took longest in a loaded run of the suite (its worker-seconds below).
_FIRST = "tests/spark/"
_LONG = (
    "tests/network/test_nemeses.py",  # 179 s
    "tests/ops/test_documented_commands.py",  # 216 s
    "tests/cluster/test_kill_campaign.py",  # the kill campaigns: 231 s together
    "tests/cluster/test_kill_campaign_fewer_replicas.py",
    "tests/cluster/test_admin_tools.py",  # 145 s
    "tests/cluster/test_replication.py",  # 144 s
    "tests/faults/test_kill_campaign.py",
    "tests/ipc/test_ipc.py",  # 109 s
)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "spark" if module.startswith(_FIRST) else module

    return ModuleScheduling(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        if item.nodeid.startswith(_FIRST):
            return 0
        module = item.nodeid.split("::", 1)[0]
        return 1 + _LONG.index(module) if module in _LONG else 1 + len(_LONG)
    items.sort(key=rank)  # stable: each keeps its order
