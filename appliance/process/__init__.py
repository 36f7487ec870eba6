"""Process plumbing every worker kind shares, below the network, disk and cluster workers: the
shared-memory objects and eventfds a broker's processes are wired with (``plumbing``), the ring
client (``disk_client``) and its wake-ups, the link between network and cluster workers, exit
codes, the event loop, the GC policy, process limits and CPU placement, and the context a ring
client's code is handed. Nothing here knows a Kafka API."""
