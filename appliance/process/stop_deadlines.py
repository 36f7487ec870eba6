"""How long a stop may take: the supervisor's deadlines per worker kind and the cluster worker's own.

systemd's ``TimeoutStopSec=60`` (systemd/appliance.service) SIGKILLs whatever is left of the unit
60 s after the SIGTERM, the supervisor included, which then cannot unlink the broker's shared
memory (the next start reclaims it) and leaves every log dir to a recovery scan. So the whole
stop, SIGTERM to the last worker gone, ends within :data:`STOP_DEADLINE_S`, with a margin for
the supervisor's own clean-up. The supervisor stops the kinds in order (the cluster worker, then
the network workers, then the disk workers); each kind is SIGKILLed at its mark, counted from
the SIGTERM (:data:`STOP_BY_S`), so one kind stuck on a dead peer cannot eat the next one's time:

- cluster worker, by 35 s: the controlled shutdown (:data:`CONTROLLED_SHUTDOWN_S`) and leaving
  ZooKeeper; it gives up by itself at :data:`CLUSTER_LEAVE_S`, the SIGKILL is the backstop;
- network workers, by 40 s: their in-flight requests get 5 s (``network_worker.STOP_GRACE_S``);
- disk workers, by 50 s: flush, checkpoints, the clean-shutdown marker.

A stop normally takes a second or two: a mark is only reached by a worker that does not answer.
"""

from __future__ import annotations

__all__ = ["STOP_DEADLINE_S", "CLUSTER_STOP_BY_S", "NETWORK_STOP_BY_S", "DISK_STOP_BY_S",
           "CLUSTER_LEAVE_S", "CONTROLLED_SHUTDOWN_S", "KILL_REAP_S", "QUIT_GRACE_S"]

STOP_DEADLINE_S = 50.0  # SIGTERM to the last worker gone; systemd's TimeoutStopSec is 60
CLUSTER_STOP_BY_S = 35.0
NETWORK_STOP_BY_S = 40.0
DISK_STOP_BY_S = STOP_DEADLINE_S
#: the cluster worker leaves (os._exit) this long after its SIGTERM whatever still waits on a
#: peer or on ZooKeeper: before the supervisor's SIGKILL, so its exit is its own and logged
CLUSTER_LEAVE_S = CLUSTER_STOP_BY_S - 2.0
#: the controlled shutdown's bound in all; leaving ZooKeeper (unregister, close the session)
#: gets the rest of CLUSTER_LEAVE_S
CONTROLLED_SHUTDOWN_S = 25.0
#: after a SIGKILL, how long the supervisor waits for the exit before going on without it (a
#: process in uninterruptible I/O on a dead disk dies only when the I/O returns)
KILL_REAP_S = 2.0
#: SIGQUIT (a fast stop): each kind's time to exit before SIGKILL
QUIT_GRACE_S = 2.0
