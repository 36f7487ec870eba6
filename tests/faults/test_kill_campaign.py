"""A bounded SIGKILL campaign (scripts/kill_campaign.py runs 200 kills): random disk worker,
network worker or whole-broker kills under an idempotent acks=all stream and a committing
consumer group. Nothing acknowledged may be lost or doubled, nothing corrupt served, and the
group's committed offsets never go backwards."""

from __future__ import annotations

import pytest

from tests.faults.kill_campaign import Campaign

pytestmark = pytest.mark.timeout(300)

ROUNDS = 6


def test_random_sigkills_lose_nothing_acknowledged(tmp_path, capsys):
    camp = Campaign(tmp_path, seed=14)
    try:
        camp.start()
        victims = [camp.round() for _ in range(ROUNDS)]
        camp.check_group_caught_up()
    finally:
        camp.close()
    rep = camp.report
    with capsys.disabled():
        print(f"\nkill campaign: {rep.line()}; victims {victims}; restart seconds "
              f"max {max(rep.restart_seconds):.1f}")
    assert not rep.problems, rep.problems[:10]
    assert rep.rounds == ROUNDS and sum(rep.kills.values()) == ROUNDS
    assert len(rep.kills) >= 2  # the seed picks more than one kind of victim
    assert rep.acked > 1000 and rep.consumed > 0 and rep.commits > 0
    assert rep.crc_errors == 0
    assert not camp.group.errors or all("Broker transport failure" in e or "Connect" in e
                                        or "Disconnected" in e for e in camp.group.errors), \
        camp.group.errors[:5]
