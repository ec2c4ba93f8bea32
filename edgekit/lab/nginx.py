"""A real nginx serving a release channel folder for tests and benchmarks: run as the invoking
user on 127.0.0.x, its config, logs and temp folders in a scratch folder (no root paths), the
channel's files read-only over GET and the devices' status reports accepted by WebDAV PUT
(`<channel>/status/<device>.json` only, 8 KiB at most) and listed (autoindex, JSON).

    with Nginx(channel_root, scratch) as web:      # web.url: http://127.0.0.20:<port>
        ...
    web.log_lines()    # "METHOD URI STATUS BODY_BYTES" per request (the access log)
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from edgekit.errors import LabSetupError

NGINX = "/usr/sbin/nginx"
HOST = "127.0.0.20"


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def config(root: Path, scratch: Path, host: str, port: int, blob_rate: str | None,
           workers: int) -> str:
    temp = " ".join(f"{kind}_temp_path {scratch}/{kind};" for kind in
                    ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    # blob_rate: a link slow enough to cut a download mid-transfer; a ranged request (the
    # resume) is not throttled, so what a test waits for is the cut, not the file's rest
    rate_map = (f'map $http_range $blob_rate {{ "" {blob_rate}; default 0; }}'
                if blob_rate else "")
    rate = "limit_rate $blob_rate;" if blob_rate else ""
    # root's workers would otherwise run as nobody, who cannot write the status folder
    user = "user root;" if os.geteuid() == 0 else ""
    return f"""{user}
worker_processes {workers};
pid {scratch}/nginx.pid;
error_log {scratch}/error.log warn;
daemon off;
events {{ worker_connections 4096; }}
http {{
  {temp}
  log_format edgekit '$request_method $uri $status $body_bytes_sent';
  access_log {scratch}/access.log edgekit;
  default_type application/octet-stream;
  {rate_map}
  sendfile on;
  keepalive_timeout 10;
  server {{
    listen {host}:{port};
    root {root};
    location / {{ limit_except GET {{ deny all; }} }}
    location /blobs/ {{ limit_except GET {{ deny all; }} {rate} }}
    location ~ "^/[A-Za-z0-9][A-Za-z0-9._-]*/status/$" {{
      limit_except GET {{ deny all; }}
      autoindex on; autoindex_format json;
    }}
    location ~ "^/[A-Za-z0-9][A-Za-z0-9._-]*/status/[A-Za-z0-9][A-Za-z0-9._-]*\\.json$" {{
      limit_except GET PUT {{ deny all; }}
      dav_methods PUT; dav_access user:rw group:r all:r;
      client_max_body_size 8k;
    }}
  }}
}}
"""


class Nginx:
    def __init__(self, root: Path, scratch: Path, host: str = HOST,
                 blob_rate: str | None = None, workers: int = 2):
        if not shutil.which(NGINX) and not Path(NGINX).is_file():
            raise LabSetupError("nginx is not installed", hint="apt-get install nginx")
        self.root, self.scratch, self.host = Path(root), Path(scratch), host
        self.scratch.mkdir(parents=True, exist_ok=True)
        self.port = _free_port(host)
        conf = self.scratch / "nginx.conf"
        conf.write_text(config(self.root, self.scratch, host, self.port, blob_rate, workers))
        self._proc = subprocess.Popen(
            [NGINX, "-p", str(self.scratch), "-e", str(self.scratch / "error.log"), "-c",
             str(conf)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, start_new_session=True)
        self._wait_ready()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                err = self._proc.stderr.read().decode(errors="replace") if self._proc.stderr \
                    else ""
                raise LabSetupError(f"nginx exited at start: {err.strip()[-300:]}")
            try:
                socket.create_connection((self.host, self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise LabSetupError("nginx did not listen within 20 s")

    def log_lines(self) -> list[list[str]]:
        path = self.scratch / "access.log"
        return [ln.split() for ln in path.read_text().splitlines()] if path.is_file() else []

    def stop(self) -> None:
        if self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGTERM)     # nginx's own group: master+workers
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait()
        if self._proc.stderr:
            self._proc.stderr.close()

    def __enter__(self) -> "Nginx":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
