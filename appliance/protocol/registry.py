"""Which APIs and versions we speak: the lookup tables the connection and broker use."""

from __future__ import annotations

from appliance.protocol import messages
from appliance.protocol.schema import ApiMessage, Data

__all__ = ["API_BY_KEY", "SUPPORTED_VERSIONS", "api_versions_entries", "inter_broker_api_for_key"]

API_BY_KEY: dict[int, type[ApiMessage]] = {
    cls.API_KEY: cls for cls in (getattr(messages, name) for name in messages.__all__)
}
if len(API_BY_KEY) != len(messages.__all__):
    raise RuntimeError("two message classes declare the same API_KEY")

SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    key: (cls.MIN_VERSION, cls.MAX_VERSION) for key, cls in sorted(API_BY_KEY.items())
}


def inter_broker_api_for_key(api_key: int) -> type[ApiMessage] | None:
    """The cluster-mode inter-broker message class for an API key (LeaderAndIsr ...), or None.
    Imported on first use and not advertised: standalone brokers do not serve these APIs."""
    from appliance.protocol.messages.cluster import INTER_BROKER_APIS

    return INTER_BROKER_APIS.get(api_key)


def api_versions_entries() -> list[Data]:
    """The ``api_keys`` array of an ApiVersions response, sorted by key (fresh objects)."""
    entry = messages.ApiVersions.Response.ApiKeys
    return [entry(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in SUPPORTED_VERSIONS.items()]
