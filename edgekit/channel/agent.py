"""`edgekit agent install HOST`: the pull agent on a device — the IREE runtime and the shims
(as `edgekit provision` puts them), the user's allowed signers, runtime_shims/agent.sh with
its config in ~/.edgekit/agent/, and a timer (systemd, else cron) that runs its poll.

After this the device needs no controller: each poll reads the channel's signed index and
updates itself (agent.sh). Over SSH or on a `local:` device alike.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from edgekit.channel.index import NAME
from edgekit.config.resources import shims_dir
from edgekit.device import layout
from edgekit.device.probe import probe
from edgekit.device.provision import needs_provisioning, provision, shim_version, sync_files
from edgekit.device.trust import install_signers
from edgekit.errors import ConfigError, DeviceIncompatible
from edgekit.toolchain.versions import iree_runtime_version
from edgekit.transport.base import Transport

AGENT_DIR = f"{layout.ROOT}/agent"
TIMERS = ("auto", "systemd", "cron", "none")
URL = re.compile(r"https?://[A-Za-z0-9.:\[\]_-]+(/[A-Za-z0-9._~%-]+)*/[A-Za-z0-9][A-Za-z0-9._-]{0,63}/?")


@dataclass(frozen=True)
class AgentInstall:
    where: str
    device_id: str
    url: str
    runtime: str
    config: str
    timer: str                  # systemd | cron | none (or what it would be, dry run)
    provisioned: bool
    uploaded: tuple[str, ...]
    dry_run: bool = False


def check_url(url: str) -> str:
    if not URL.fullmatch(url):
        raise ConfigError(f"{url!r} is not a channel URL (http(s)://server/.../NAME)",
                          key="channel")
    return url.rstrip("/")


def install_agent(conn: Transport, url: str, device_id: str, runtime: str | None = None,
                  timer: str = "auto", interval_s: int = 300, dry_run: bool = False
                  ) -> AgentInstall:
    url = check_url(url)
    if not NAME.fullmatch(device_id):
        raise ConfigError(f"device id {device_id!r} is not a plain name", key="device-id")
    if timer not in TIMERS:
        raise ConfigError(f"--timer is one of {', '.join(TIMERS)}", key="timer")
    runtime = runtime or iree_runtime_version()
    info = probe(conn)
    tools = conn.run(["sh", "-c", "for t in curl wget ssh-keygen sha256sum od awk; do "
                                  "command -v $t >/dev/null 2>&1 && echo $t; done; "
                                  "printf 'home %s\\n' \"$HOME\""],
                     what="checking the agent's tools on the device").text
    found = set(tools.split())
    home = next((ln[5:] for ln in tools.splitlines() if ln.startswith("home ")), "")
    missing = [t for t in ("ssh-keygen", "sha256sum", "od", "awk") if t not in found]
    if not {"curl", "wget"} & found:
        missing.insert(0, "curl or wget")
    if missing:
        raise DeviceIncompatible(f"the agent needs {', '.join(missing)} on the device",
                                 where=conn.where,
                                 hint="install them (Debian: apt-get install curl "
                                      "openssh-client coreutils)")
    if not home.startswith("/") or not re.fullmatch(r"[A-Za-z0-9._/+@-]+", home):
        raise DeviceIncompatible(f"unusual home directory {home!r} on the device",
                                 where=conn.where)
    root = f"{home}/{layout.ROOT}"
    config = (f"url {url}\ndevice {device_id}\nroot {root}\n"
              f"shims {home}/{layout.shims_dir(shim_version())}\n")
    needs = needs_provisioning(info, runtime)
    if dry_run:
        return AgentInstall(conn.where, device_id, url, runtime, config,
                            timer if timer != "auto" else "systemd or cron", needs, (),
                            dry_run=True)
    result = provision(conn, info, runtime)
    install_signers(conn)
    uploaded = list(result.uploaded)
    with tempfile.TemporaryDirectory(prefix="edgekit-agent-") as tmp:
        conf = Path(tmp) / "config"
        conf.write_text(config)
        sync_files(conn, [(shims_dir() / "agent.sh", f"{AGENT_DIR}/agent.sh")], uploaded,
                   mode=0o755)
        sync_files(conn, [(conf, f"{AGENT_DIR}/config")], uploaded, mode=0o644)
    kind = "none"
    if timer != "none":
        done = conn.run(["sh", f"{AGENT_DIR}/agent.sh", "install-timer", timer,
                         str(int(interval_s))], check=False)
        if done.returncode != 0:
            raise DeviceIncompatible(
                f"no timer for the agent: {done.stderr.decode(errors='replace').strip()[-200:]}",
                where=conn.where,
                hint="install cron, or pass --timer none and run "
                     f"`sh ~/{AGENT_DIR}/agent.sh poll` from your own scheduler")
        kind = done.text.strip()[:16]
    return AgentInstall(conn.where, device_id, url, runtime, config, kind,
                        bool(result.uploaded), tuple(uploaded))


def poll(conn: Transport, timeout: float = 900) -> tuple[int, str]:
    """Run one poll of the installed agent now: (exit status, its stderr's tail)."""
    done = conn.run(["sh", f"{AGENT_DIR}/agent.sh", "poll"], check=False, timeout=timeout)
    return done.returncode, done.stderr.decode(errors="replace").strip()[-2000:]
