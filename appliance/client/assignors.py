"""Partition assignors run by the group leader: range, roundrobin and sticky, under the protocol
names Java, librdkafka and kafka-python members use, so mixed groups agree.

Each assignor maps ``{member_id: Subscription}`` and ``{topic: partition count}`` to
``{member_id: {topic: [partitions]}}``; every partition of a subscribed topic goes to exactly one
member that subscribes to it.

- **range**: per topic, members subscribing to it sorted by member id; each gets a consecutive
  range, the first ``partitions % members`` one extra (Kafka's RangeAssignor).
- **roundrobin**: all subscribed partitions sorted by (topic, partition) dealt in turn to the
  members sorted by id, skipping members not subscribed to the topic (Kafka's RoundRobinAssignor).
- **sticky**: balanced first, sticky second (the consumer design's two goals). Members keep the
  partitions they owned (taken from owned_partitions, else from Kafka's StickyAssignor user data;
  a partition claimed twice goes to the claim of the higher generation); unowned partitions go to
  the eligible member holding fewest; then partitions move from the fullest to the emptiest
  eligible member until no member holds two more than another that could take one. Each member
  publishes its assignment in the StickyAssignor user data format, so Java sticky members can
  read it. The algorithm is ours (not a port of Kafka's), so with mixed sticky members the
  leader's result may differ from Kafka's in which partitions move — never in validity.
"""

from __future__ import annotations

from typing import Protocol

from appliance.client.subscription import (
    Subscription,
    decode_sticky_user_data,
    encode_sticky_user_data,
)

__all__ = ["Assignor", "RangeAssignor", "RoundRobinAssignor", "StickyAssignor", "ASSIGNORS", "make_assignor"]

Assignment = dict[str, dict[str, list[int]]]


class Assignor(Protocol):
    name: str

    def assign(self, members: dict[str, Subscription], partitions: dict[str, int]) -> Assignment: ...

    def user_data(self, owned: dict[str, list[int]], generation: int) -> bytes | None: ...


def _empty(members: dict[str, Subscription]) -> Assignment:
    return {m: {} for m in members}


def _add(out: Assignment, member: str, topic: str, partition: int) -> None:
    out[member].setdefault(topic, []).append(partition)


class RangeAssignor:
    name = "range"

    def assign(self, members: dict[str, Subscription], partitions: dict[str, int]) -> Assignment:
        out = _empty(members)
        topics = sorted({t for s in members.values() for t in s.topics if t in partitions})
        for topic in topics:
            consumers = sorted(m for m, s in members.items() if topic in s.topics)
            n, extra = divmod(partitions[topic], len(consumers))
            start = 0
            for i, m in enumerate(consumers):
                length = n + (1 if i < extra else 0)
                for p in range(start, start + length):
                    _add(out, m, topic, p)
                start += length
        return out

    def user_data(self, owned: dict[str, list[int]], generation: int) -> bytes | None:
        return None


class RoundRobinAssignor:
    name = "roundrobin"

    def assign(self, members: dict[str, Subscription], partitions: dict[str, int]) -> Assignment:
        out = _empty(members)
        consumers = sorted(members)
        subs = {m: set(members[m].topics) for m in consumers}
        topics = sorted({t for s in subs.values() for t in s if t in partitions})
        i = 0
        for topic in topics:
            for p in range(partitions[topic]):
                while topic not in subs[consumers[i % len(consumers)]]:
                    i += 1
                _add(out, consumers[i % len(consumers)], topic, p)
                i += 1
        return out

    def user_data(self, owned: dict[str, list[int]], generation: int) -> bytes | None:
        return None


class StickyAssignor:
    name = "sticky"

    def user_data(self, owned: dict[str, list[int]], generation: int) -> bytes | None:
        return encode_sticky_user_data(sorted((t, sorted(ps)) for t, ps in owned.items()), generation)

    @staticmethod
    def _previous(sub: Subscription) -> tuple[list[tuple[str, int]], int]:
        owned, generation = sub.owned_partitions, sub.generation_id
        if sub.user_data:
            try:
                ud_owned, ud_gen = decode_sticky_user_data(sub.user_data)
                if not owned:
                    owned = ud_owned
                generation = max(generation, ud_gen)
            except ValueError:
                pass  # another assignor's user data: nothing to stick to
        return [(t, p) for t, ps in owned for p in ps], generation

    def assign(self, members: dict[str, Subscription], partitions: dict[str, int]) -> Assignment:
        subs = {m: set(s.topics) for m, s in members.items()}
        valid = {(t, p) for t, n in partitions.items() if any(t in s for s in subs.values()) for p in range(n)}
        # Keep previous ownership; a partition claimed twice goes to the newer generation's claim.
        claims: dict[tuple[str, int], tuple[int, str]] = {}
        for m in sorted(members):
            prev, gen = self._previous(members[m])
            for tp in prev:
                if tp in valid and tp[0] in subs[m] and (tp not in claims or gen > claims[tp][0]):
                    claims[tp] = (gen, m)
        held: dict[str, list[tuple[str, int]]] = {m: [] for m in members}
        for tp, (_, m) in sorted(claims.items()):
            held[m].append(tp)
        for tp in sorted(valid - set(claims)):
            eligible = [m for m in members if tp[0] in subs[m]]
            best = min(eligible, key=lambda m: (len(held[m]), m))
            held[best].append(tp)
        self._balance(held, subs)
        out = _empty(members)
        for m, tps in held.items():
            for t, p in sorted(tps):
                _add(out, m, t, p)
        return out

    @staticmethod
    def _balance(held: dict[str, list[tuple[str, int]]], subs: dict[str, set[str]]) -> None:
        # Each move takes from a member holding at least two more than the receiver, so the sum
        # of squared loads falls strictly: the loop ends.
        while True:
            moved = False
            for giver in sorted(held, key=lambda m: (-len(held[m]), m)):
                for taker in sorted(held, key=lambda m: (len(held[m]), m)):
                    if len(held[giver]) <= len(held[taker]) + 1:
                        break
                    for tp in reversed(held[giver]):
                        if tp[0] in subs[taker]:
                            held[giver].remove(tp)
                            held[taker].append(tp)
                            moved = True
                            break
                    if moved:
                        break
                if moved:
                    break
            if not moved:
                return


ASSIGNORS = {"range": RangeAssignor, "roundrobin": RoundRobinAssignor, "sticky": StickyAssignor}


def make_assignor(name: str) -> Assignor:
    """Raises InvalidConfigError for an unknown name."""
    from appliance.errors import InvalidConfigError

    cls = ASSIGNORS.get(name)
    if cls is None:
        raise InvalidConfigError(f"config partition.assignment.strategy={name!r}: expected one of "
                                 + ", ".join(ASSIGNORS))
    return cls()
