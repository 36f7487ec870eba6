"""The one table of how each API is served (broker/handlers ROUTES), read without a broker."""

from __future__ import annotations

from appliance.broker import handlers
from appliance.protocol.messages.cluster import INTER_BROKER_APIS
from appliance.protocol.registry import API_BY_KEY


def test_every_client_api_is_served_in_both_modes():
    """Every API a client may send (the registry, what ApiVersions advertises) has a handler
    standalone and in a cluster: a one-broker Kafka cluster answers them all."""
    missing = {key: r for key, r in handlers.ROUTES.items() if key in API_BY_KEY
               and (r.standalone is None or r.cluster is None)}
    assert not missing
    assert set(API_BY_KEY) <= set(handlers.ROUTES)


def test_inter_broker_apis_are_served_in_a_cluster_only():
    for key in INTER_BROKER_APIS:
        route = handlers.ROUTES[key]
        assert route.standalone is None and route.cluster is not None, key
    assert set(handlers.ROUTES) == set(API_BY_KEY) | set(INTER_BROKER_APIS)


def test_each_mode_gets_its_own_column():
    standalone, cluster = handlers.table_for(cluster=False), handlers.table_for(cluster=True)
    assert set(standalone) == set(API_BY_KEY)
    assert set(cluster) == set(API_BY_KEY) | set(INTER_BROKER_APIS)
    for key, route in handlers.ROUTES.items():
        if key in standalone:
            assert standalone[key].handler is route.standalone
        assert cluster[key].handler is route.cluster
        assert cluster[key].task_free == route.task_free
    assert handlers.TASK_FREE == {0}  # Produce, in both modes
