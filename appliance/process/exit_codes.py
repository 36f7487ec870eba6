"""How a worker process tells the supervisor why it ended (its exit status)."""

from __future__ import annotations

__all__ = ["EXIT_OK", "EXIT_CRASHED", "EXIT_BOOT_ERROR"]

EXIT_OK = 0
EXIT_CRASHED = 1  # an unexpected exception: respawn
EXIT_BOOT_ERROR = 3  # could not start (bad log dir, port taken): respawning would only loop; halt
