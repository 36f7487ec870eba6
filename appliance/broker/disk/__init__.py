"""The disk worker: the only process that writes the partitions of one log.dir.

- :mod:`.worker` — the process: start, the loop, stop (:class:`~.worker.DiskWorker`)
- :mod:`.requests` — the table of ring message types -> handlers, and the completion each gets
- :mod:`.partitions` — the partitions this disk owns: register, publish offsets, produce,
  create, delete, alter
- :mod:`.ring_intake` — the request rings of the network workers, completions and doorbells
- :mod:`.ipc_intake` — the channels of local IPC producers
- :mod:`.coordinator_host` — the group coordinator of the offsets partitions this disk holds
- :mod:`.maintenance` — periodic storage work (retention, flush, checkpoints, the cleaner)
"""
