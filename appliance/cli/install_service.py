"""`appliance install-service [--root DIR] [--name NAME] [--config FILE] [--override k=v ...]`.

Installs the broker as a systemd service: the system user and group (systemd-sysusers), the
configuration in /etc/appliance, the state and log dirs owned by the user, the hardened unit from
``systemd/`` with a drop-in giving it ``ReadWritePaths=`` for every log dir, and enables it
(``systemctl --root``, which works on a mounted image as well as on the running system).

``--name NAME`` installs an instance of the template ``appliance@.service`` configured by
/etc/appliance/NAME.properties, so several brokers share one host. ``--root DIR`` installs into
another root file system (an image, or a test's temporary dir).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from appliance.cli.main import CliError
from appliance.cli.serve import parse_overrides

__all__ = ["add_arguments", "run", "UNIT_DIR", "UNIT_EXEC"]

UNIT_DIR = Path(__file__).resolve().parents[2] / "systemd"
UNIT_EXEC = "/opt/appliance/.venv/bin/appliance"  # the ExecStart the unit files name
STATE_DIR = "/var/lib/appliance"
_NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", default="/", metavar="DIR", help="root file system to install into (default /)")
    p.add_argument("--name", metavar="NAME",
                   help="install the instance appliance@NAME (config /etc/appliance/NAME.properties)")
    p.add_argument("--config", metavar="FILE",
                   help="server.properties to install (default: the documented defaults)")
    p.add_argument("--override", metavar="KEY=VALUE", action="append", default=[],
                   help="set one property in the installed config (repeatable)")
    p.add_argument("--user", default="appliance", help="system user and group to run as (default appliance)")
    p.add_argument("--exec", dest="exec_path", metavar="PATH",
                   help="the appliance executable ExecStart runs (default: the one running now)")
    p.add_argument("--force", action="store_true", help="replace an existing, different config file")
    p.add_argument("--no-enable", action="store_true", help="do not enable the unit")


def _default_exec() -> str:
    here = Path(sys.executable).parent / "appliance"
    return str(here) if here.exists() else UNIT_EXEC


def _config_text(args: argparse.Namespace, default_dir: str) -> tuple[str, dict[str, str]]:
    from appliance.config import parse_properties, render_server_properties

    if args.config:
        try:
            text = Path(args.config).read_text(encoding="latin-1")
        except OSError as e:
            raise CliError(f"--config {args.config}: {e.strerror}", 2) from e
    else:
        text = render_server_properties()
    overrides = parse_overrides(args.override)
    raw = {**parse_properties(text), **overrides}
    if "log.dirs" not in raw and ("log.dir" not in raw or raw["log.dir"] == "./data"):
        overrides["log.dirs"] = f"{default_dir}/data"  # the relative default means nothing here
    if overrides:
        text = text.rstrip("\n") + "\n\n# set by appliance install-service\n" + "".join(
            f"{k}={v}\n" for k, v in overrides.items())
    return text, overrides


def _ids(root: Path, user: str) -> tuple[int, int]:
    """uid and gid of ``user`` in the root's own user database."""
    for line in (root / "etc/passwd").read_text().splitlines():
        f = line.split(":")
        if f[0] == user:
            return int(f[2]), int(f[3])
    raise CliError(f"user {user} was not created in {root}/etc/passwd")


def _run(cmd: list[str]) -> None:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError as e:
        raise CliError(f"{cmd[0]} is not installed (apt-get install -y systemd)") from e
    if r.returncode:
        raise CliError(f"{' '.join(cmd)} failed: {r.stderr.strip()}")


def _mkdir(path: Path, mode: int, uid: int, gid: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, uid, gid)
    os.chmod(path, mode)


def _write(path: Path, text: str, mode: int, uid: int = 0, gid: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.chown(tmp, uid, gid)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def run(args: argparse.Namespace) -> int:
    from appliance.config import BrokerConfig, ConfigError, parse_properties

    if args.name is not None and not _NAME_RE.fullmatch(args.name):
        raise CliError(f"--name {args.name!r}: use 1-64 characters of [A-Za-z0-9_.-]", 2)
    if not re.fullmatch(r"[a-z_][a-z0-9_-]{0,31}", args.user):
        raise CliError(f"--user {args.user!r} is not a valid system user name", 2)
    if os.geteuid() != 0:
        raise CliError("install-service must run as root (it creates a user and chowns dirs)")
    root = Path(args.root).resolve()
    if not root.is_dir():
        raise CliError(f"--root {args.root}: not a directory", 2)
    instance = args.name
    state_dir = f"{STATE_DIR}/{instance}" if instance else STATE_DIR
    conf_name = f"{instance}.properties" if instance else "server.properties"
    unit_file = "appliance@.service" if instance else "appliance.service"
    unit_name = f"appliance@{instance}.service" if instance else "appliance.service"
    exec_path = args.exec_path or _default_exec()
    if not os.path.isabs(exec_path):
        raise CliError(f"--exec {exec_path!r}: give an absolute path", 2)

    text, _ = _config_text(args, state_dir)
    try:
        config = BrokerConfig.load(overrides=parse_properties(text))
    except ConfigError as e:
        raise CliError(str(e), 2) from e
    log_dirs = [os.path.normpath(d) for d in config.log_dirs]
    for d in log_dirs:
        if not os.path.isabs(d):
            raise CliError(f"log dir {d!r}: the service needs absolute paths", 2)
    for p in [exec_path, *log_dirs]:
        if p == "/root" or p.startswith(("/home/", "/root/", "/run/user/")):
            raise CliError(f"{p} is under a home dir, which the unit hides (ProtectHome=yes)", 2)
    try:
        unit_text = (UNIT_DIR / unit_file).read_text()
    except OSError as e:
        raise CliError(f"unit file {UNIT_DIR / unit_file}: {e.strerror}") from e
    unit_text = unit_text.replace(UNIT_EXEC, exec_path)
    if args.user != "appliance":
        unit_text = re.sub(r"(?m)^(User|Group)=appliance$", rf"\1={args.user}", unit_text)

    conf_path = root / "etc/appliance" / conf_name
    if conf_path.exists() and conf_path.read_text() != text and not args.force:
        raise CliError(f"{conf_path} exists and differs; pass --force to replace it", 2)

    # the user and group, through the root's own user database
    (root / "etc").mkdir(parents=True, exist_ok=True)
    sysusers = f'u {args.user} - "appliance broker" {STATE_DIR}\n'
    _write(root / f"etc/sysusers.d/{args.user}.conf", sysusers, 0o644)
    _run(["systemd-sysusers", f"--root={root}", "--inline", sysusers.strip()])
    uid, gid = _ids(root, args.user)

    _mkdir(root / "etc/appliance", 0o750, 0, gid)
    _write(conf_path, text, 0o640, 0, gid)
    _mkdir(root / STATE_DIR.lstrip("/"), 0o750, uid, gid)
    _mkdir(root / state_dir.lstrip("/"), 0o750, uid, gid)
    for d in log_dirs:
        _mkdir(root / d.lstrip("/"), 0o750, uid, gid)

    units = root / "etc/systemd/system"
    _write(units / unit_file, unit_text, 0o644)
    dropin = ("# written by appliance install-service: the log dirs of "
              f"/etc/appliance/{conf_name}\n[Service]\n"
              + "".join(f"ReadWritePaths={d}\n" for d in log_dirs))
    _write(units / f"{unit_name}.d" / "log-dirs.conf", dropin, 0o644)
    if not args.no_enable:
        _run(["systemctl", f"--root={root}", "enable", unit_name])
    running = root == Path("/") and Path("/run/systemd/system").is_dir()
    if running:
        _run(["systemctl", "daemon-reload"])
    print(f"installed {unit_name}: config {conf_path}, log dirs {', '.join(log_dirs)}, "
          f"user {args.user} ({uid}:{gid})")
    if root == Path("/"):
        print(f"start it with: systemctl start {unit_name}; follow it with: journalctl -u {unit_name} -f")
    if shutil.which("systemd-analyze") is None:
        print("note: systemd-analyze is missing; the unit was not checked", file=sys.stderr)
    return 0
