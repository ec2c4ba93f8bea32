"""Run commands as an ordinary (non-root) user, for the tests that prove the lab needs no root.

Not root already: the commands simply run as this user. Root (CI): a temporary system user is
created (recorded by name and uid, removed afterwards), and each command runs as it in a
private mount namespace where root's home is an empty tmpfs except for what the commands need
(this Python installation, the arm64 rootfs): nothing is mounted or changed on the machine
beyond the user and its temporary folder.
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class OrdinaryUser:
    name: str
    uid: int
    gid: int
    home: Path                  # a private folder of the user's (their $HOME)
    reveal: list[Path] = field(default_factory=list)    # paths under root's home to keep

    def chown(self, path: Path) -> None:
        if os.geteuid() == 0:
            subprocess.run(["chown", "-R", f"{self.uid}:{self.gid}", str(path)], check=True)

    def run(self, argv: list[str], env: dict[str, str], timeout: float = 600
            ) -> subprocess.CompletedProcess:
        env = {**env, "HOME": str(self.home), "USER": self.name, "LOGNAME": self.name}
        if os.geteuid() != 0:
            return subprocess.run(argv, env=env, capture_output=True, text=True,
                                  timeout=timeout, cwd=self.home)
        return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                               self._namespace_script(), "sh", *argv],
                              env=env, capture_output=True, text=True, timeout=timeout,
                              cwd=self.home)

    def _namespace_script(self) -> str:
        """Hide root's home behind a tmpfs (0755: traversable), bringing back `reveal`."""
        q = shlex.quote
        hidden = Path(pwd.getpwuid(0).pw_dir)
        keep = [p for p in self.reveal if hidden in p.parents]
        lines = ["set -e", 'S=$(mktemp -d)']
        for i, path in enumerate(keep):
            lines += [f"mkdir $S/{i}", f"mount --bind {q(str(path))} $S/{i}"]
        lines.append(f"mount -t tmpfs -o mode=755 tmpfs {q(str(hidden))}")
        for i, path in enumerate(keep):
            lines += [f"mkdir -p {q(str(path))}", f"mount --move $S/{i} {q(str(path))}",
                      f"rmdir $S/{i}"]
        lines += ["rmdir $S",
                  f'exec setpriv --reuid={self.uid} --regid={self.gid} --clear-groups "$@"']
        return "\n".join(lines)


def _python_prefixes() -> list[Path]:
    return sorted({Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)})


def ordinary_user(reveal: list[Path]):
    """A context: the OrdinaryUser to run commands as (created when root, then removed)."""
    return _UserContext(reveal)


class _UserContext:
    def __init__(self, reveal: list[Path]):
        self.reveal = [*_python_prefixes(), *reveal]
        self.created: tuple[str, int] | None = None
        self.folder: Path | None = None

    def __enter__(self) -> OrdinaryUser:
        self.folder = Path(tempfile.mkdtemp(prefix="edgekit-ordinary-user-", dir="/tmp"))
        if os.geteuid() != 0:
            me = pwd.getpwuid(os.getuid())
            return OrdinaryUser(me.pw_name, me.pw_uid, me.pw_gid, self.folder, self.reveal)
        name = f"ekusr{uuid.uuid4().hex[:8]}"
        subprocess.run(["useradd", "--system", "--user-group", "--no-create-home",
                        "--home-dir", str(self.folder), "--shell", "/bin/sh", name],
                       check=True, capture_output=True)
        entry = pwd.getpwnam(name)
        self.created = (name, entry.pw_uid)
        user = OrdinaryUser(name, entry.pw_uid, entry.pw_gid, self.folder, self.reveal)
        user.chown(self.folder)
        self.folder.chmod(0o700)
        return user

    def __exit__(self, *exc) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
        if self.created is not None:
            name, uid = self.created
            try:
                still_ours = pwd.getpwnam(name).pw_uid == uid
            except KeyError:
                still_ours = False
            if still_ours:      # only the user this context created, by name and uid
                subprocess.run(["userdel", name], check=True, capture_output=True)
