"""Whether a TCP port is free to listen on, asked before any worker is forked.

The workers bind their ports after the fork; one that cannot exits with EXIT_BOOT_ERROR, which
says only that it could not start. Checking first lets the supervisor name the address and the
reason and stop before it creates anything.
"""

from __future__ import annotations

import socket

__all__ = ["bind_error"]


def bind_error(host: str, port: int, family: socket.AddressFamily = socket.AF_INET) -> str | None:
    """Why ``host:port`` cannot be bound now (the OS's words), or None if it can. SO_REUSEADDR
    as the workers set it, so a port in TIME_WAIT after a restart counts as free."""
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            return e.strerror
    return None
