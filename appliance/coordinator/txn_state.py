"""A transaction's states and the only legal moves between them (Kafka's TransactionState).

    Empty / CompleteCommit / CompleteAbort ──AddPartitions──▶ Ongoing ──EndTxn(commit)──▶ PrepareCommit
                                                            │  │                          │ markers written
                                                            │  └─EndTxn(abort), timeout─▶ PrepareAbort ──▶ CompleteAbort
                                                            └─a new instance's InitProducerId─▶ PrepareEpochFence ─┘
    PrepareCommit ──markers written──▶ CompleteCommit
    Empty / CompleteCommit / CompleteAbort ──transactional.id.expiration.ms──▶ Dead

- Empty: an id with a producer id and epoch, no transaction yet.
- Ongoing: partitions (or a group's offsets) added; records may be written.
- PrepareCommit / PrepareAbort: the decision is in the log; the markers are being written.
  The decision is durable, so a coordinator that loads this state resumes the markers.
- CompleteCommit / CompleteAbort: every marker written; a new transaction may begin.
- Dead: expired, about to be removed (its tombstone is written).
- PrepareEpochFence: an ongoing transaction of a fenced producer, to be aborted with a bumped
  epoch (written as PrepareAbort, as Kafka does: the state is never persisted).

:data:`TRANSITIONS` maps each state to the states it may move to; a move not in it is a bug
and raises :class:`IllegalTransition`. :data:`STATUS_BYTE` is the int8 the log stores.
"""

from __future__ import annotations

__all__ = ["TxnState", "TRANSITIONS", "STATUS_BYTE", "STATE_OF_BYTE", "IllegalTransition",
           "check_transition", "COMPLETE", "PREPARE"]


class TxnState:
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"


_S = TxnState
# Kafka's byte per state (TransactionState.id): the log's transaction_status
STATUS_BYTE: dict[str, int] = {
    _S.EMPTY: 0, _S.ONGOING: 1, _S.PREPARE_COMMIT: 2, _S.PREPARE_ABORT: 3,
    _S.COMPLETE_COMMIT: 4, _S.COMPLETE_ABORT: 5, _S.DEAD: 6, _S.PREPARE_EPOCH_FENCE: 7,
}
STATE_OF_BYTE: dict[int, str] = {b: s for s, b in STATUS_BYTE.items()}

_DONE = frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT})
# state -> the states it may move to (Kafka's validPreviousStates, read the other way)
TRANSITIONS: dict[str, frozenset[str]] = {
    # Empty -> Empty and Complete* -> Empty: a new InitProducerId (epoch bump) with nothing open
    _S.EMPTY: frozenset({_S.EMPTY, _S.ONGOING, _S.DEAD}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.PREPARE_COMMIT, _S.PREPARE_ABORT, _S.PREPARE_EPOCH_FENCE}),
    _S.PREPARE_COMMIT: frozenset({_S.COMPLETE_COMMIT}),
    _S.PREPARE_ABORT: frozenset({_S.COMPLETE_ABORT}),
    _S.COMPLETE_COMMIT: frozenset({_S.EMPTY, _S.ONGOING, _S.DEAD}),
    _S.COMPLETE_ABORT: frozenset({_S.EMPTY, _S.ONGOING, _S.DEAD}),
    _S.DEAD: frozenset(),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.PREPARE_ABORT}),
}
PREPARE = frozenset({_S.PREPARE_COMMIT, _S.PREPARE_ABORT})
COMPLETE = _DONE  # no transaction open: a new one may begin, the id may expire


class IllegalTransition(RuntimeError):
    pass


def check_transition(old: str, new: str) -> None:
    """Raises IllegalTransition unless ``old`` may move to ``new``."""
    if new not in TRANSITIONS[old]:
        raise IllegalTransition(f"transaction state {old} -> {new}")
