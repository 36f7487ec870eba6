"""TLS benchmark: the same broker's PLAINTEXT, SSL and SASL_SSL listeners, produce and fetch side by side.

Usage: .venv/bin/python perf/bench_tls.py [--records 8000000] [--runs 3] [--quick]
           [--value-size 100] [--partitions 6] [--profile DIR] [--profile-seconds 8] [--keep]

Each run makes a fresh broker (tests/broker_process.py) with three listeners,
PLAINTEXT://127.0.0.1:p1, SSL://127.0.0.1:p2 and SASL_SSL://127.0.0.1:p3 (ssl.keystore.location:
a broker certificate for 127.0.0.1 signed by a throw-away CA made with `cryptography`,
tests/security/certs.py, EC P-256; clients trust the CA with ssl.ca.location). Over SASL_SSL
the clients log in with SCRAM-SHA-512 (sasl.mechanism, sasl.username, sasl.password) as a user
made, before any timed phase, with `appliance configs --alter --entity-type users
--add-config 'SCRAM-SHA-512=[iterations=4096,password=...]'` over the PLAINTEXT listener
(the broker keeps it in scram-credentials.json). Then, with bench_broker.py's warm-up, clients
and CPU accounting:

- warm-up, untimed: a topic produced to over every listener and read by kcat several times over
  each (every network worker loads its kernels and serves a TLS fetch before the clock runs);
- produce: confluent-kafka produce_batch (bench_broker.py's producer: acks=1, no compression,
  linger.ms=20, 1 MB batches) of --records values of --value-size bytes, once over each
  listener, each to its own 6-partition topic;
- consume: kcat (C, librdkafka) reads the topic written over PLAINTEXT from offset 0, once
  over each listener: the same segment bytes every time. Over PLAINTEXT the broker sends
  them with sendfile; over SSL and SASL_SSL it reads them with pread (TLS_READ_STEP bytes at a
  time, appliance/broker/network_worker.py) and writes them through the SSL transport, which
  encrypts them in the network worker. kcat's SASL login (SCRAM-SHA-512, a few round trips)
  falls inside the timed consume, as its TLS handshake does;
- the sendfile floor: the topic's segments sent with plain os.sendfile over loopback (what the
  kernel alone charges for these bytes here);
- the TLS path's parts without a broker, in this process, over the same segment files in
  TLS_READ_STEP steps: pread alone; pread and encryption into TLS records through ssl memory
  BIOs (OpenSSL, no socket; the suite a default client negotiates with such a server context);
  pread and a blocking write to a loopback socket (the copy that replaces sendfile).

The order of the listeners rotates between runs (run 1 PLAINTEXT, SSL, SASL_SSL; run 2 SSL,
SASL_SSL, PLAINTEXT; run 3 SASL_SSL, PLAINTEXT, SSL; ...), for the produces and for the consumes,
so a machine that speeds up or slows down inside a run does not favour one listener.

Printed per run and as medians (min-max) over the runs: records/s, broker CPU seconds per GB of
log (psutil, the supervisor and all its workers; 1 GB = 1e9 bytes), the client's CPU (kcat's
decryption competes for the same two cores) and the CPU others used meanwhile. Ratios
SSL/PLAINTEXT and SASL_SSL/PLAINTEXT are taken within each run and their median is what the
targets are judged on, for each of the two TLS listeners:

- produce over SSL, and over SASL_SSL, >= 0.8 x produce over PLAINTEXT (records/s);
- consume (kcat) over SSL, and over SASL_SSL, >= 0.5 x over PLAINTEXT (records/s);
- broker CPU per GB fetched over SSL and SASL_SSL against PLAINTEXT (the sendfile path):
  printed, no target.

SASL_SSL/SSL is printed too (no target): after the login a SASL_SSL connection's bytes take the
SSL path, so it should be near 1.

--profile DIR adds, after the measured phases of run 1, two more SSL reads of the same topic and
two SSL produces of 3,000,000 records to another topic (not counted in any figure) with py-spy
on every network worker: one Python-only (--nonblocking) and one with native frames (--native:
py-spy stops the process for each sample, so that phase is slower). Raw (collapsed) stacks go
to DIR as <phase>-SSL-<python|native>-network<i>.txt and a summary is printed: the hottest
leaf frames and functions and, for native stacks, how the busy samples split between OpenSSL,
the write and pread system calls, locks (pthread_mutex_lock: mostly the GIL taken back), libc's
memory functions (memcpy, malloc; py-spy shows most of them by address only) and Python/uvloop.
A connection lands on one network worker; the other one shows up nearly idle. The profiled
phases are over SSL only (SASL_SSL's data path is the same once logged in).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_broker import (  # noqa: E402
    WARMUP_READERS,
    WARMUP_RECORDS,
    Phase,
    consume_kcat,
    create_topic,
    log_bytes,
    produce,
    pyspy_bin,
    sendfile_floor,
    stop_pyspy,
)

from appliance.broker import network_worker  # noqa: E402
from tests.broker_process import BrokerProcess, free_port, stop_on_sigterm  # noqa: E402
from tests.ops.procs import appliance  # noqa: E402
from tests.security.certs import Authority, name  # noqa: E402

TARGET_PRODUCE_RATIO = 0.8
TARGET_CONSUME_RATIO = 0.5
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")
TLS_PROTOCOLS = ("SSL", "SASL_SSL")  # each judged against PLAINTEXT
SASL_MECHANISM = "SCRAM-SHA-512"
SASL_USER, SASL_PASSWORD = "bench", "bench-secret"
SCRAM_ITERATIONS = 4096  # Kafka's default (the client's PBKDF2 per login)
PROFILE_PRODUCE_RECORDS = 3_000_000  # per profiled SSL produce (--profile)
TLS_READ_STEP = network_worker.TLS_READ_STEP  # the broker's read-and-encrypt step
READ_TOPIC = "bench-PLAINTEXT"  # the topic every consume reads (same bytes)


def make_pki(directory: Path) -> tuple[Path, Path]:
    """(CA file, broker keystore): a throw-away CA and a broker certificate for 127.0.0.1."""
    ca = Authority("bench_tls CA")
    ca_file = ca.write(directory / "ca.pem")
    keystore, _, _ = ca.issue(name(O="appliance", CN="broker"),
                              hosts=("127.0.0.1", "localhost")).write(directory, "broker")
    return ca_file, keystore


def uptime() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


# --- what the TLS path's parts cost without a broker ------------------------------------------------

def _files_steps(files: list[Path], step: int):
    for f in files:
        with open(f, "rb") as fh:
            fd, off, size = fh.fileno(), 0, f.stat().st_size
            while off < size:
                yield fd, off, min(step, size - off)
                off += step


def tls_floors(files: list[Path], ca_file: Path, keystore: Path, step: int) -> dict[str, float | str]:
    """CPU seconds per GB of the files, in this thread, for the TLS fetch path's parts:

    - "pread": reading them from the page cache in ``step``-byte preads;
    - "pread+encrypt": the same, each step written into a server-side ssl.SSLObject over memory
      BIOs (what the SSL transport does: OpenSSL cuts 16 KiB records and encrypts them) and the
      records read out of the outgoing BIO; no socket. Its difference from "pread" is OpenSSL's
      share (encryption, record framing, the BIO copies);
    - "pread+write": the same preads written to a loopback TCP socket (blocking, sendall) that a
      child process drains: the copy into the socket that replaces sendfile, without TLS;
    and "cipher", the suite a default client and the broker's kind of server context agree on.
    """
    gb = sum(f.stat().st_size for f in files) / 1e9
    out: dict[str, float | str] = {}
    t0 = time.thread_time()
    for fd, off, n in _files_steps(files, step):
        os.pread(fd, n, off)
    out["pread"] = (time.thread_time() - t0) / gb

    sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    sctx.load_cert_chain(str(keystore))
    cctx = ssl.create_default_context(cafile=str(ca_file))
    s_in, s_out, c_in, c_out = (ssl.MemoryBIO() for _ in range(4))
    server = sctx.wrap_bio(s_in, s_out, server_side=True)
    client = cctx.wrap_bio(c_in, c_out, server_hostname="127.0.0.1")
    done = {id(server): False, id(client): False}
    for _ in range(20):
        for end in (client, server):
            if not done[id(end)]:
                try:
                    end.do_handshake()
                    done[id(end)] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            break
    else:
        raise RuntimeError("in-memory TLS handshake did not finish")
    out["cipher"] = f"{server.version()} {server.cipher()[0]}"
    t0 = time.thread_time()
    for fd, off, n in _files_steps(files, step):
        server.write(os.pread(fd, n, off))
        s_out.read()
    out["pread+encrypt"] = (time.thread_time() - t0) / gb

    lsock = socket.create_server(("127.0.0.1", 0))
    reader = os.fork()
    if reader == 0:  # child: read and drop everything
        try:
            conn, _ = lsock.accept()
            buf = bytearray(4 << 20)
            while conn.recv_into(buf):
                pass
        finally:
            os._exit(0)
    try:
        with socket.create_connection(lsock.getsockname()) as sock:
            t0 = time.thread_time()
            for fd, off, n in _files_steps(files, step):
                sock.sendall(os.pread(fd, n, off))
            out["pread+write"] = (time.thread_time() - t0) / gb
    finally:
        lsock.close()
        os.waitpid(reader, 0)
    return out


# --- py-spy, raw (collapsed) stacks --------------------------------------------------------------

def start_pyspy_raw(pid: int, out: Path, duration: int, native: bool) -> subprocess.Popen:
    cmd = [pyspy_bin(), "record", "--pid", str(pid), "--duration", str(duration), "--rate", "200",
           "--format", "raw", "--output", str(out)]
    cmd.append("--native" if native else "--nonblocking")
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


_FRAME = re.compile(r"^(?P<func>.*?) \((?P<where>[^()]*)\)$")

# leaf frames (native profiles) by where the CPU goes; py-spy names a stripped library's
# functions by address only, so OpenSSL's are told apart by library
_BUCKETS = (
    ("OpenSSL libcrypto (AES-GCM encryption, GHASH)", re.compile(r"\(libcrypto|aesni|gcm|ghash", re.I)),
    ("OpenSSL libssl (TLS records, memory BIO)", re.compile(r"\(libssl|^SSL_|^ssl3_|^tls1?_|^BIO_", re.I)),
    ("system calls: write (the socket)", re.compile(r"^(__libc_)?(write|writev|send|sendmsg) ", re.I)),
    ("system calls: pread (the page cache)", re.compile(r"^(__libc_)?pread(64)? ", re.I)),
    ("system calls: read (the socket)", re.compile(r"^(__libc_)?(read|recv|recvmsg) ", re.I)),
    # before "memory": libc's lock functions are named, and would fall under its "(libc.so" catch-all
    ("locks (pthread_mutex_*, futex: mostly the GIL taken back)", re.compile(r"^(pthread_mutex|pthread_cond|__lll_lock|futex)", re.I)),
    ("memory (malloc, free, memcpy: libc)", re.compile(r"malloc|free|memcpy|memmove|realloc|\(libc\.so", re.I)),
)
_IDLE = re.compile(r"^epoll_(p)?wait ")  # a wait py-spy's native mode counts as busy


def _leaf_bucket(frame: str) -> str:
    for label, rx in _BUCKETS:
        if rx.search(frame):
            return label
    if ".py:" in frame:
        return "Python code (interpreted frames)"
    if ".pyx" in frame or ".c:" in frame or "uvloop" in frame:
        return "uvloop and libuv (Cython, C)"
    return "other native (CPython interpreter, _ssl module, ...)"


def summarize_raw(path: Path, top: int = 14) -> str:
    """Top functions by self and total share of samples, and (native profiles) the split of
    leaf frames between OpenSSL, system calls, memory and Python."""
    self_f: collections.Counter = collections.Counter()
    total_f: collections.Counter = collections.Counter()
    buckets: collections.Counter = collections.Counter()
    n = idle = 0
    if not path.exists():
        return f"{path.name}: no profile written"
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        c = int(count)
        frames = [f for f in stack.split(";") if f and not f.startswith("process ")
                  and not f.startswith("thread ")]
        if not frames:
            continue
        if _IDLE.match(frames[-1]):
            idle += c
            continue
        n += c
        self_f[frames[-1]] += c
        buckets[_leaf_bucket(frames[-1])] += c
        for f in set(frames):
            m = _FRAME.match(f)
            total_f[m.group("func") if m else f] += c
    out = [f"{path.name}: {n} busy samples (200 Hz)" + (f", {idle} in epoll_wait left out" if idle else "")]
    if not n:
        return out[0]
    out.append("  self%   leaf frame")
    out += [f"  {100 * c / n:5.1f}   {f[:110]}" for f, c in self_f.most_common(top)]
    out.append("  total%  function (frames on >= 90% of stacks left out)")
    out += [f"  {100 * c / n:5.1f}   {f[:110]}" for f, c in total_f.most_common() if c < 0.9 * n][:top]
    out.append("  share   where the leaf frames are")
    out += [f"  {100 * c / n:5.1f}   {b}" for b, c in buckets.most_common()]
    return "\n".join(out)


# --- one run --------------------------------------------------------------------------------------

def create_scram_user(broker: BrokerProcess) -> None:
    """The SASL_SSL clients' SCRAM-SHA-512 user, made over the PLAINTEXT listener (untimed)."""
    r = appliance("configs", "--bootstrap-server", broker.bootstrap, "--alter", "--entity-type", "users",
                  "--entity-name", SASL_USER, "--add-config",
                  f"{SASL_MECHANISM}=[iterations={SCRAM_ITERATIONS},password={SASL_PASSWORD}]")
    if r.returncode != 0:
        raise RuntimeError(f"appliance configs (SCRAM user) exited {r.returncode}: {r.stderr[-2000:]}")


def run_once(args: argparse.Namespace, run: int, order: tuple[str, ...], pki: tuple[Path, Path],
             profile_dir: Path | None) -> dict:
    ca_file, keystore = pki
    work = Path(tempfile.mkdtemp(prefix="bench-tls-", dir=args.dir))
    plain, tls, sasl_tls = free_port(), free_port(), free_port()
    broker = BrokerProcess(work, port=plain, overrides={
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls},SASL_SSL://127.0.0.1:{sasl_tls}",
        "ssl.keystore.location": str(keystore),
        "sasl.enabled.mechanisms": SASL_MECHANISM,
        "num.partitions": str(args.partitions),
    })
    conf = {
        "PLAINTEXT": {"bootstrap.servers": broker.bootstrap},
        "SSL": {"bootstrap.servers": f"127.0.0.1:{tls}", "security.protocol": "SSL",
                "ssl.ca.location": str(ca_file)},
        "SASL_SSL": {"bootstrap.servers": f"127.0.0.1:{sasl_tls}", "security.protocol": "SASL_SSL",
                     "ssl.ca.location": str(ca_file), "sasl.mechanism": SASL_MECHANISM,
                     "sasl.username": SASL_USER, "sasl.password": SASL_PASSWORD},
    }
    result: dict = {"order": order, "load_before": uptime()}
    spies: list[subprocess.Popen] = []
    try:
        broker.start()
        create_scram_user(broker)
        t0 = time.perf_counter()
        create_topic(broker.bootstrap, args.partitions, "bench-warmup")
        for proto in PROTOCOLS:
            produce(broker, WARMUP_RECORDS // 2, args.value_size, topic="bench-warmup",
                    partitions=args.partitions, client_conf=conf[proto])
        for _ in range(WARMUP_READERS):
            for proto in PROTOCOLS:
                consume_kcat(broker, WARMUP_RECORDS // 2 * len(PROTOCOLS), topic="bench-warmup",
                             client_conf=conf[proto])
        result["warmup_s"] = time.perf_counter() - t0
        for proto in PROTOCOLS:
            create_topic(broker.bootstrap, args.partitions, f"bench-{proto}")
        time.sleep(1.0)

        for proto in order:
            size0 = log_bytes(broker)
            ph = produce(broker, args.records, args.value_size, topic=f"bench-{proto}",
                         partitions=args.partitions, client_conf=conf[proto])
            result[f"produce {proto}"] = (ph, log_bytes(broker) - size0)
            time.sleep(1.0)  # let the disk worker's periodic work settle
        size = sum(f.stat().st_size for d in broker.log_dirs
                   for f in Path(d).glob(f"{READ_TOPIC}-*/*.log"))
        for proto in order:
            ph = consume_kcat(broker, args.records, topic=READ_TOPIC, client_conf=conf[proto])
            result[f"consume {proto}"] = (ph, size)
            time.sleep(1.0)
        files = [f for d in broker.log_dirs for f in Path(d).glob(f"{READ_TOPIC}-*/*.log")]
        result["floor"] = sendfile_floor(files, 8 << 20)
        result["tls_floors"] = tls_floors(files, ca_file, keystore, TLS_READ_STEP)
        result["load_after"] = uptime()

        if profile_dir is not None:  # extra SSL reads and writes, not counted in any figure
            net_pids = sorted(broker.worker_pids("network worker"))
            create_topic(broker.bootstrap, args.partitions, "bench-profile")
            for phase in ("consume", "produce"):
                for native in (False, True):
                    kind = "native" if native else "python"
                    spies = [start_pyspy_raw(pid, profile_dir / f"{phase}-SSL-{kind}-network{i}.txt",
                                             args.profile_seconds, native)
                             for i, pid in enumerate(net_pids)]
                    time.sleep(0.5)  # py-spy attaches
                    if phase == "consume":
                        ph = consume_kcat(broker, args.records, topic=READ_TOPIC, client_conf=conf["SSL"])
                        result[f"profiled {phase} {kind}"] = (ph, size, args.records)
                    else:
                        n = min(args.records, PROFILE_PRODUCE_RECORDS)
                        size0 = log_bytes(broker)
                        ph = produce(broker, n, args.value_size, topic="bench-profile",
                                     partitions=args.partitions, client_conf=conf["SSL"])
                        result[f"profiled {phase} {kind}"] = (ph, log_bytes(broker) - size0, n)
                    for s in spies:
                        stop_pyspy(s)
                    spies = []
    except BaseException:
        print(f"broker log tail ({broker.log_path}):\n{broker.log()[-4000:]}", file=sys.stderr)
        raise
    finally:
        for s in spies:
            stop_pyspy(s)
        try:
            broker.stop()
        finally:
            broker.kill()
            broker._log.close()
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
    return result


def describe(ph: Phase, size: int, records: int) -> dict:
    gb = size / 1e9
    client = ph.client + ph.external_client
    return {
        "rps": records / ph.elapsed,
        "log_mbs": size / ph.elapsed / 1e6,
        "broker_s_per_gb": ph.cpu["total"] / gb,
        "network_s_per_gb": ph.cpu.get("network", 0.0) / gb,
        "network_sys_s_per_gb": ph.cpu.get("network_sys", 0.0) / gb,
        "disk_s_per_gb": ph.cpu.get("disk", 0.0) / gb,
        "client_s_per_gb": client / gb,
        "broker_cores": ph.cpu["total"] / ph.elapsed,
        "client_cores": client / ph.elapsed,
        "other_cores": ph.others / ph.elapsed,
    }


def verdict(value: float, target: float) -> str:
    return f"{'MET' if value >= target else 'NOT MET'} (target >= {target})"


def main() -> None:
    stop_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=None,
                    help="records per produce and per consume (default 8,000,000: 1.5-3 min per run "
                         "with three listeners on a shared 2-core machine; 2,000,000 with --quick)")
    ap.add_argument("--runs", type=int, default=None, help="runs, listener order rotating (default 3; 2 with --quick)")
    ap.add_argument("--quick", action="store_true", help="2,000,000 records, 2 runs")
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--dir", default=None, help="parent of the temporary broker directory")
    ap.add_argument("--profile", default=None, metavar="DIR",
                    help="after run 1's measured phases, two SSL reads under py-spy (network workers)")
    ap.add_argument("--profile-seconds", type=int, default=8)
    ap.add_argument("--keep", action="store_true", help="keep the broker directory (debugging)")
    args = ap.parse_args()
    if args.records is None:
        args.records = 2_000_000 if args.quick else 8_000_000
    if args.runs is None:
        args.runs = 2 if args.quick else 3
    if shutil.which("kcat") is None:
        sys.exit("kcat is needed (the consume phases)")
    profile_dir = Path(args.profile) if args.profile else None
    if profile_dir:
        profile_dir.mkdir(parents=True, exist_ok=True)

    pki_dir = Path(tempfile.mkdtemp(prefix="bench-tls-pki-", dir=args.dir))
    stats: dict[str, list[dict]] = collections.defaultdict(list)
    ratios: dict[str, list[float]] = collections.defaultdict(list)
    floors: list[float] = []
    tfs: list[dict] = []
    loads: list[str] = []
    profiled: dict | None = None
    try:
        pki = make_pki(pki_dir)
        for run in range(args.runs):
            k = run % len(PROTOCOLS)
            order = PROTOCOLS[k:] + PROTOCOLS[:k]  # rotated: each listener first in turn
            res = run_once(args, run, order, pki, profile_dir if run == 0 else None)
            loads.append(f"{res['load_before']} -> {res['load_after']}")
            print(f"run {run + 1} (order {', '.join(res['order'])}; load average "
                  f"{loads[-1]}; warm-up {res['warmup_s']:.1f} s)", flush=True)
            d = {}
            for phase in ("produce", "consume"):
                for proto in PROTOCOLS:
                    key = f"{phase} {proto}"
                    ph, size = res[key]
                    d[key] = describe(ph, size, args.records)
                    stats[key].append(d[key])
                    x = d[key]
                    print(f"  {key:18s}: {x['rps']:>10,.0f} rec/s {x['log_mbs']:6.1f} MB/s log | broker "
                          f"{x['broker_s_per_gb']:.3f} s/GB (network {x['network_s_per_gb']:.3f}, of which "
                          f"sys {x['network_sys_s_per_gb']:.3f}; disk {x['disk_s_per_gb']:.3f}) | client "
                          f"{x['client_s_per_gb']:.2f} s/GB | cores: broker {x['broker_cores']:.2f} "
                          f"client {x['client_cores']:.2f} others {x['other_cores']:.2f}", flush=True)
                    if ph.client_errors:
                        print(f"      client errors: {dict(ph.client_errors)}", flush=True)
            floors.append(res["floor"][0])
            for proto, base in (*((p, "PLAINTEXT") for p in TLS_PROTOCOLS), ("SASL_SSL", "SSL")):
                pair = f"{proto}/{base}"
                r = {
                    "produce rec/s": d[f"produce {proto}"]["rps"] / d[f"produce {base}"]["rps"],
                    "consume rec/s": d[f"consume {proto}"]["rps"] / d[f"consume {base}"]["rps"],
                    "fetch CPU/GB": (d[f"consume {proto}"]["broker_s_per_gb"]
                                     / d[f"consume {base}"]["broker_s_per_gb"]),
                    "produce CPU/GB": (d[f"produce {proto}"]["broker_s_per_gb"]
                                       / d[f"produce {base}"]["broker_s_per_gb"]),
                }
                for k, v in r.items():
                    ratios[f"{pair} {k}"].append(v)
                print(f"  {pair:18s}: produce {r['produce rec/s']:.2f}x, consume {r['consume rec/s']:.2f}x, "
                      f"broker CPU per GB fetched {r['fetch CPU/GB']:.1f}x, per GB produced "
                      f"{r['produce CPU/GB']:.1f}x", flush=True)
            print(f"  sendfile floor {res['floor'][0]:.3f} s/GB (sys {res['floor'][1]:.3f})", flush=True)
            tf = res["tls_floors"]
            tfs.append(tf)
            print(f"  without a broker, {TLS_READ_STEP >> 10} KiB steps ({tf['cipher']}): pread {tf['pread']:.3f},"
                  f" pread+encrypt {tf['pread+encrypt']:.3f}, pread+write to a socket {tf['pread+write']:.3f} s/GB",
                  flush=True)
            if run == 0 and profile_dir is not None:
                profiled = {k: describe(*res[k]) for k in res if k.startswith("profiled")}
    finally:
        shutil.rmtree(pki_dir, ignore_errors=True)

    def med(key: str, field: str) -> tuple[float, float, float]:
        v = [s[field] for s in stats[key]]
        return statistics.median(v), min(v), max(v)

    def fmt(t: tuple[float, float, float], f: str = ",.0f") -> str:
        return f"{t[0]:{f}} ({t[1]:{f}}-{t[2]:{f}})"

    print(f"\nmedians (min-max) of {args.runs} runs, {args.records:,} records of {args.value_size} B, "
          f"{args.partitions} partitions, {os.cpu_count()} CPUs; load average per run: {'; '.join(loads)}")
    for key in stats:
        print(f"{key:18s}: {fmt(med(key, 'rps'))} records/s; broker {fmt(med(key, 'broker_s_per_gb'), '.3f')}"
              f" s/GB (network workers {fmt(med(key, 'network_s_per_gb'), '.3f')}); client"
              f" {fmt(med(key, 'client_s_per_gb'), '.2f')} s/GB; others {med(key, 'other_cores')[0]:.2f} cores")
    print(f"sendfile floor (8 MiB calls, no broker): {statistics.median(floors):.3f} s/GB "
          f"({min(floors):.3f}-{max(floors):.3f})")
    tmed = {k: statistics.median(t[k] for t in tfs) for k in ("pread", "pread+encrypt", "pread+write")}
    print(f"the TLS path's parts without a broker ({tfs[0]['cipher']}, {TLS_READ_STEP >> 10} KiB steps): "
          f"pread {tmed['pread']:.3f} s/GB, + encrypt (OpenSSL, memory BIO) "
          f"{tmed['pread+encrypt'] - tmed['pread']:.3f}, + write to a socket "
          f"{tmed['pread+write'] - tmed['pread']:.3f}; their sum "
          f"{tmed['pread+encrypt'] + tmed['pread+write'] - tmed['pread']:.3f} s/GB against the broker's "
          f"{med('consume SSL', 'broker_s_per_gb')[0]:.3f}")
    for k, v in ratios.items():
        print(f"{k}: median {statistics.median(v):.2f}x (runs: "
              f"{', '.join(f'{x:.2f}' for x in v)})")

    def ratio(pair: str, k: str) -> float:
        return statistics.median(ratios[f"{pair} {k}"])

    print(f"\ntargets (median of the per-run ratios; SASL_SSL logs in with {SASL_MECHANISM}):")
    for proto in TLS_PROTOCOLS:
        pair = f"{proto}/PLAINTEXT"
        print(f"  produce {pair} >= {TARGET_PRODUCE_RATIO}: "
              f"{verdict(round(ratio(pair, 'produce rec/s'), 2), TARGET_PRODUCE_RATIO)}")
        print(f"  consume {pair} >= {TARGET_CONSUME_RATIO}: "
              f"{verdict(round(ratio(pair, 'consume rec/s'), 2), TARGET_CONSUME_RATIO)}")
    for proto in TLS_PROTOCOLS:
        pair = f"{proto}/PLAINTEXT"
        print(f"  broker CPU per GB fetched: {proto} {med(f'consume {proto}', 'broker_s_per_gb')[0]:.3f} s/GB "
              f"against PLAINTEXT (sendfile) {med('consume PLAINTEXT', 'broker_s_per_gb')[0]:.3f} s/GB, "
              f"{ratio(pair, 'fetch CPU/GB'):.1f}x (no target)")
    for proto in TLS_PROTOCOLS:
        pair = f"{proto}/PLAINTEXT"
        print(f"  (broker CPU per GB produced: {proto} {med(f'produce {proto}', 'broker_s_per_gb')[0]:.3f} s/GB "
              f"against PLAINTEXT {med('produce PLAINTEXT', 'broker_s_per_gb')[0]:.3f} s/GB, "
              f"{ratio(pair, 'produce CPU/GB'):.1f}x: the producer's rate is bound by the client "
              f"and the machine's other load, this is the broker's own share)")
    print(f"  SASL_SSL/SSL (no target): produce {ratio('SASL_SSL/SSL', 'produce rec/s'):.2f}x, consume "
          f"{ratio('SASL_SSL/SSL', 'consume rec/s'):.2f}x, broker CPU per GB fetched "
          f"{ratio('SASL_SSL/SSL', 'fetch CPU/GB'):.2f}x")

    if profile_dir is not None:
        print()
        if profiled:
            for k, x in profiled.items():
                print(f"{k} over SSL (py-spy attached, not in the figures): {x['rps']:,.0f} rec/s, "
                      f"broker {x['broker_s_per_gb']:.3f} s/GB")
        for f in sorted(profile_dir.glob("*-SSL-*.txt")):
            print(summarize_raw(f))
            print()


if __name__ == "__main__":
    main()
