"""Consumer groups: the group coordinator and the records it keeps in ``__consumer_offsets``.

- :mod:`.offsets_schema` — the key/value formats of ``__consumer_offsets`` records (Kafka's)
- :mod:`.group` — one group's members and its state machine (a documented transition table)
- :mod:`.coordinator` — the coordinator of every group whose offsets partition a disk worker holds
- :mod:`.routing` — which offsets partition (and so which disk worker) coordinates a group
"""
