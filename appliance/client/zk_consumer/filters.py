"""Topic filters for ``create_message_streams_by_filter``: a Whitelist or a Blacklist holding a
regex (Python's ``re``, matched against the whole topic name). As in Kafka 0.8, commas separate
alternatives ("a,b" is "a|b") and spaces are dropped; internal topics (``__consumer_offsets``)
never match while exclude.internal.topics is true."""

from __future__ import annotations

import re

from appliance.client.zk_consumer.znodes import BLACK_LIST, WHITE_LIST

__all__ = ["TopicFilter", "Whitelist", "Blacklist", "INTERNAL_TOPICS", "filter_for"]

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


class TopicFilter:
    pattern_name = ""  # the "pattern" of the consumer's registration znode

    def __init__(self, regex: str) -> None:
        """Raises ValueError naming the regex when it does not compile."""
        self.regex = regex.replace(" ", "").replace(",", "|").strip("\"'")
        try:
            self._compiled = re.compile(self.regex)
        except re.error as e:
            raise ValueError(f"topic filter {regex!r}: not a regular expression ({e})") from None

    def _matches(self, topic: str) -> bool:
        return self._compiled.fullmatch(topic) is not None

    def allows(self, topic: str, exclude_internal: bool = True) -> bool:
        if exclude_internal and topic in INTERNAL_TOPICS:
            return False
        return self._allowed(topic)

    def _allowed(self, topic: str) -> bool:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.regex!r})"


class Whitelist(TopicFilter):
    pattern_name = WHITE_LIST

    def _allowed(self, topic: str) -> bool:
        return self._matches(topic)


class Blacklist(TopicFilter):
    pattern_name = BLACK_LIST

    def _allowed(self, topic: str) -> bool:
        return not self._matches(topic)


def filter_for(pattern: str, regex: str) -> TopicFilter:
    """The filter a registration znode describes (pattern white_list or black_list)."""
    return Whitelist(regex) if pattern == WHITE_LIST else Blacklist(regex)
