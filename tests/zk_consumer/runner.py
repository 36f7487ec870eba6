"""A ZooKeeper consumer in a process of its own, for the tests: reads its config (JSON) from
argv[1], creates ``n`` streams of the topic in argv[2] (or, with ``--whitelist REGEX``, of a
filter) and prints one line per message, ``topic partition offset value``, flushed at once, so
a test that SIGKILLs it knows exactly what it handed out. SIGTERM shuts the connector down
(commit, release) and exits 0.
"""

from __future__ import annotations

import json
import signal
import sys
import threading

from appliance.client.zk_consumer import ConsumerTimeout, Whitelist, create_java_consumer_connector


def main() -> int:
    config = json.loads(sys.argv[1])
    what, n = sys.argv[2], int(sys.argv[3])
    connector = create_java_consumer_connector(config)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if what.startswith("whitelist:"):
        streams = connector.create_message_streams_by_filter(Whitelist(what.split(":", 1)[1]), n)
    else:
        streams = connector.create_message_streams({what: n})[what]
    lock = threading.Lock()
    print("READY", flush=True)

    def read(stream) -> None:
        while not stop.is_set():
            try:
                for m in stream:
                    with lock:
                        sys.stdout.write(f"{m.topic} {m.partition} {m.offset} {m.message.decode()}\n")
                        sys.stdout.flush()
                    if stop.is_set():
                        break
                return
            except ConsumerTimeout:
                continue

    threads = [threading.Thread(target=read, args=(s,), daemon=True) for s in streams]
    for t in threads:
        t.start()
    stop.wait()
    connector.shutdown()
    for t in threads:
        t.join(5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
