"""README as a test (issue 40): the README's tour and every block of the docs marked runnable,
run in order and as printed by an ordinary user (a temporary one when the tests run as root) in
a clone's working directory, on the lab devices the commands themselves start. The only
substitution is a board's documentation address by the lab device's name."""

import shlex
import shutil
import sys

import pytest

from tests.docs_blocks import (README, REPO, markdown_files, runnable_blocks,
                               substitute_board_addresses)
from tests.lab.ordinary_user import ordinary_user

PAGES = [p for p in markdown_files() if runnable_blocks(p)]
LAB_DEVICE = "lab-x86_64-1"     # the first device `edgekit lab up` starts in a fresh lab


@pytest.fixture(scope="module")
def user():
    with ordinary_user(reveal=[]) as user:
        # `edgekit` as the user's PATH finds it: this tree's code under this Python
        bin_dir = user.home / "bin"
        bin_dir.mkdir()
        wrapper = bin_dir / "edgekit"
        wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m edgekit "$@"\n')
        wrapper.chmod(0o755)
        user.chown(user.home)
        yield user


def clone(user, name: str):
    """A working directory with what a clone gives the docs' commands."""
    work = user.home / name
    for folder in ("recipes", "targets"):
        shutil.copytree(REPO / folder, work / folder)
    user.chown(work)
    return work


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_runnable_blocks_run_as_printed(user, page):
    name = page.relative_to(REPO).with_suffix("").as_posix().replace("/", "-")
    work = clone(user, name)
    env = {"PATH": f"{user.home / 'bin'}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
           "PYTHONPATH": str(REPO), "EDGEKIT_HOME": str(user.home / f"{name}-home"),
           "EDGEKIT_CACHE_DIR": str(user.home / "cache"), "EDGEKIT_PROGRESS": "none",
           "COLUMNS": "80", "LANG": "C.UTF-8"}

    def run(command: str):
        return user.run(["bash", "-c", f"cd {shlex.quote(str(work))}\n{command}"], env)

    ran = []
    try:
        for block in runnable_blocks(page):
            for printed in block.commands():
                command = substitute_board_addresses(printed, LAB_DEVICE)
                proc = run(command)
                ran.append(command)
                assert proc.returncode == 0, (
                    f"{page.relative_to(REPO)}:{block.line}: `{printed}` exited "
                    f"{proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    finally:
        run("edgekit lab down")         # whatever the page started, also when a step failed
    if page == README:
        assert ran[-1] == "edgekit lab down" and len(ran) >= 8
