"""Two first uses of the arm64 userland at once (two `edgekit lab up`s, two test workers on a
fresh machine) build it once: the second waits for the first and finds it ready. Without the
lock each cleared the other's staging directory ("tar: ….partial: Cannot open")."""

import os
import subprocess
import sys
import textwrap

from edgekit.lab.rootfs import READY_MARK

# stands in for mmdebstrap's minutes of downloads only: writes the tarball it is asked for
# (the argument after the suite), with the programs a usable rootfs must have, slowly
FAKE_MMDEBSTRAP = textwrap.dedent("""\
    #!/bin/sh
    echo run >> "$BUILDS_LOG"
    while [ "$1" != bookworm ]; do shift; done
    tarball=$2
    tree=$(mktemp -d)
    mkdir -p "$tree/usr/lib/openssh" "$tree/usr/bin"
    touch "$tree/usr/lib/openssh/sftp-server" "$tree/usr/bin/curl"
    sleep 1
    tar -C "$tree" -cf "$tarball" .
    rm -rf "$tree"
    """)


def test_two_first_uses_at_once_build_the_userland_once(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "mmdebstrap"
    fake.write_text(FAKE_MMDEBSTRAP)
    fake.chmod(0o755)
    root = tmp_path / "cache" / "rootfs-arm64-bookworm"
    log = tmp_path / "builds.log"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "EDGEKIT_ROOTFS_DIR": str(root), "BUILDS_LOG": str(log)}
    code = "from edgekit.lab.rootfs import ensure_rootfs; print(ensure_rootfs())"
    users = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(u.wait(timeout=60), *u.communicate()) for u in users]

    for rc, out, err in results:
        assert rc == 0, err
        assert out.strip() == str(root)
    assert log.read_text().splitlines() == ["run"]
    assert (root / READY_MARK).is_file() and (root / "usr/bin/curl").is_file()
    assert not root.with_name(root.name + ".partial").exists()
