"""Faults injected for real into deploys to a real sshd lab device: edgekit SIGKILLed at each
step of a deploy and of a rollback, a health hook that hangs, the device's disk full during
and after the upload. After each: `current` is a complete release that validated (old or new),
and the next deploy leaves no leftovers."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edgekit.api.build import BuildOptions, build
from edgekit.config.paths import cache_root
from edgekit.lab import devices as lab
from tests.fixtures.killable import edgekit_to_kill

REPO = Path(__file__).resolve().parents[2]
RECIPE = (REPO / "recipes" / "kws_mlp.yaml").read_text()
PAGE = 4096
FLOOD = "yes | head -c 300000000; yes no | head -c 300000000 >&2; echo last words >&2"


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    """Two releases of the app `faulty` (other seeds: other weights), and v2 with hooks (other
    releases: the hooks are in the signed manifest, which the release id covers)."""
    folder = tmp_path_factory.mktemp("fault-bundles")
    recipes = {"v1": RECIPE.replace("seed: 0", "seed: 3"),
               "v2": RECIPE.replace("seed: 0", "seed: 4"),
               "v2-hangs": RECIPE.replace("seed: 0", "seed: 4")
               + "hooks: {health: 'echo $$ > \"$HOME/hook.pgid\"; sleep 100000 & sleep 100000',"
                 " timeout_s: 3}\n",
               "v2-slow-hook": RECIPE.replace("seed: 0", "seed: 4")
               + "hooks: {after_activate: 'sleep 4'}\n",
               "v2-unhealthy": RECIPE.replace("seed: 0", "seed: 4")
               + "hooks: {health: 'sleep 2; exit 1'}\n",
               # 300 MB on stdout and on stderr, then healthy or not
               "v2-floods": RECIPE.replace("seed: 0", "seed: 4")
               + f"hooks: {{health: '{FLOOD}'}}\n",
               "v2-floods-fails": RECIPE.replace("seed: 0", "seed: 4")
               + f"hooks: {{health: '{FLOOD}; exit 1'}}\n"}
    built = {}
    for name, text in recipes.items():
        recipe = folder / f"{name}.yaml"
        recipe.write_text(text.replace("name: kws-mlp", "name: faulty"))
        built[name] = build(BuildOptions(recipe=recipe, target="host",
                                         out=folder / name)).bundle.path
    return built


class Device:
    """The lab device's app directory, seen from this machine."""

    def __init__(self, lab_device, app: str = "faulty"):
        self.lab = lab_device
        self.app_dir = lab_device.host_path(f"{lab_device.home}/.edgekit/apps/{app}")

    def reset(self) -> None:
        shutil.rmtree(self.app_dir, ignore_errors=True)

    def current(self) -> str | None:
        link = self.app_dir / "current"
        return link.readlink().name if link.is_symlink() else None

    def releases(self) -> set[str]:
        path = self.app_dir / "releases"
        return {p.name for p in path.iterdir()} if path.is_dir() else set()

    def scratch(self) -> list[str]:
        return sorted(p.name for p in self.app_dir.iterdir() if p.name.startswith(".")) \
            if self.app_dir.is_dir() else []

    def journal(self) -> list[tuple[str, str]]:
        path = self.app_dir / "journal.jsonl"
        lines = path.read_text().splitlines() if path.is_file() else []
        return [(e["event"], e["release"]) for e in map(json.loads, lines)]

    def complete(self, release: str) -> bool:
        """Every file of the release matches its SHA256SUMS."""
        return subprocess.run(["sha256sum", "-c", "--quiet", "--strict", "SHA256SUMS"],
                              cwd=self.app_dir / "releases" / release,
                              capture_output=True).returncode == 0

    def assert_current_is_a_validated_complete_release(self) -> str:
        current = self.current()
        assert current is not None and self.complete(current), (current, self.scratch())
        assert ("validated", current) in self.journal()
        return current


def edgekit(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edgekit.cli.main", *args],
                          capture_output=True, text=True, timeout=timeout)


def deploy(bundle: Path, device) -> subprocess.CompletedProcess:
    # as a person reads it: the error as its line on stderr (under --json it is JSON on stdout)
    return edgekit("deploy", str(bundle), "--host", device.name)


def release_of(bundle: Path) -> str:
    from edgekit.device.deploy import release_id
    from edgekit.models.bundle import load_bundle
    return release_id(load_bundle(bundle))


def kill_when(args: list[str], reached, timeout: float = 180, must_kill: bool = True) -> bool:
    """Run the CLI and SIGKILL it the moment `reached()` is true (polled every ms); True if
    it was killed before it finished."""
    with edgekit_to_kill(*args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as proc:
        deadline = time.monotonic() + timeout
        while proc.poll() is None and time.monotonic() < deadline:
            if reached():
                proc.kill()
                break
            time.sleep(0.001)
        proc.kill()
        _, err = proc.communicate()
    if must_kill:
        assert proc.returncode == -9, f"it ended before the step: {err.decode()[-500:]}"
    return proc.returncode == -9


@pytest.fixture
def device(fault_device):
    d = Device(fault_device)
    d.reset()
    yield d
    d.reset()


# --- SIGKILL at each step ---------------------------------------------------------------------

def _in_releases(device, release):
    return lambda: release in device.releases()


def _staging_has(device, name):
    return lambda: any((device.app_dir / s / name).exists() for s in device.scratch()
                       if s.startswith(".staging-"))


STEPS = {
    # marker written, nothing uploaded yet
    "before upload": lambda d, new: lambda: any(s.startswith(".inflight-") for s in d.scratch()),
    "during upload": lambda d, new: _staging_has(d, "module.vmfb"),
    "after upload": lambda d, new: _in_releases(d, new),
    "during validation": lambda d, new: lambda: any(s.startswith(".validation-")
                                                    for s in d.scratch()),
    "between rename and journal": lambda d, new: lambda: d.current() == new,
}


@pytest.mark.parametrize("step", list(STEPS))
def test_a_deploy_killed_at_each_step_leaves_a_complete_current_and_no_leftovers_after(
        bundles, device, fault_device, step):
    old, new = release_of(bundles["v1"]), release_of(bundles["v2-slow-hook"])
    assert deploy(bundles["v1"], fault_device).returncode == 0
    # the slow after_activate hook keeps the deploy running once `current` switched
    kill_when(["deploy", str(bundles["v2-slow-hook"]), "--host", fault_device.name],
              STEPS[step](device, new))
    current = device.assert_current_is_a_validated_complete_release()
    assert current in (old, new)
    time.sleep(0.5)   # what the killed session started on the device ends
    proc = deploy(bundles["v2-slow-hook"], fault_device)
    assert proc.returncode == 0, proc.stderr
    assert device.current() == new and device.complete(new)
    assert device.scratch() == []
    assert device.releases() == {old, new}


def test_a_rollback_killed_midway_leaves_a_complete_current(bundles, device, fault_device):
    old, new = release_of(bundles["v1"]), release_of(bundles["v2"])
    assert deploy(bundles["v1"], fault_device).returncode == 0
    # the health hook fails after 2 s: edgekit then verifies and restores the old release
    unhealthy = release_of(bundles["v2-unhealthy"])
    kill_when(["deploy", str(bundles["v2-unhealthy"]), "--host", fault_device.name],
              lambda: ("health-failed", unhealthy) in device.journal())
    assert device.assert_current_is_a_validated_complete_release() in (old, unhealthy)
    assert deploy(bundles["v2"], fault_device).returncode == 0
    # `edgekit rollback` re-verifies the target, then switches: killed while verify.sh runs
    # (or after it finished, if it was faster than this loop: either way a complete release)
    kill_when(["rollback", fault_device.name, "--app", "faulty"],
              lambda: any("verify.sh" in c for c in lab.command_lines(fault_device)),
              must_kill=False)
    # the rollback target is the release activated before v2: old, or the unhealthy one if
    # the kill came before edgekit put old back
    assert device.assert_current_is_a_validated_complete_release() in (old, unhealthy, new)
    time.sleep(0.5)
    assert deploy(bundles["v2"], fault_device).returncode == 0
    assert device.scratch() == [] and new in device.releases() <= {old, unhealthy, new}


# --- hooks ------------------------------------------------------------------------------------

def test_a_hanging_health_hook_is_killed_on_the_device_and_the_old_release_restored(
        bundles, device, fault_device):
    old = release_of(bundles["v1"])
    assert deploy(bundles["v1"], fault_device).returncode == 0
    proc = deploy(bundles["v2-hangs"], fault_device)
    assert proc.returncode == 16, proc.stderr
    assert "health hook did not finish within 3 s" in proc.stderr.splitlines()[0]
    assert device.current() == old
    home = fault_device.host_path(fault_device.home)
    pgid = int((home / "hook.pgid").read_text())
    survivors = subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True, text=True)
    assert survivors.stdout == "", "the hook's processes still run on the device"
    assert not any("sleep 100000" in c for c in lab.command_lines(fault_device))
    assert ("health-failed", release_of(bundles["v2-hangs"])) in device.journal()


# edgekit's own peak RSS (VmHWM), written to the file named first at exit
PEAK_RSS = """
import atexit, runpy, sys
from pathlib import Path
out = Path(sys.argv.pop(1))
atexit.register(lambda: out.write_text(next(line.split()[1] for line in open("/proc/self/status")
                                            if line.startswith("VmHWM:"))))
sys.argv[0] = "edgekit"
runpy.run_module("edgekit.cli.main", run_name="__main__")
"""


def deploy_measured(bundle: Path, device, peak: Path) -> tuple[subprocess.CompletedProcess, int]:
    """A deploy, and its process's peak RSS in MiB."""
    proc = subprocess.run([sys.executable, "-c", PEAK_RSS, str(peak), "deploy", str(bundle),
                           "--host", device.name], capture_output=True, text=True, timeout=300)
    return proc, int(peak.read_text()) // 1024


def test_a_health_hook_flooding_600_mb_keeps_edgekit_small_and_its_verdict_counts(
        bundles, device, fault_device, tmp_path):
    old = release_of(bundles["v1"])
    proc, quiet_mib = deploy_measured(bundles["v1"], fault_device, tmp_path / "quiet")
    assert proc.returncode == 0, proc.stderr
    # healthy: the deploy goes through, edgekit keeps each stream's first and last MiB only
    proc, flood_mib = deploy_measured(bundles["v2-floods"], fault_device, tmp_path / "flood")
    assert proc.returncode == 0, proc.stderr
    new = device.assert_current_is_a_validated_complete_release()
    assert new == release_of(bundles["v2-floods"])
    # measured: 69 MiB without a flood, 128 MiB with 600 MB, 132 MiB with 1.8 GB (bounded, not
    # proportional: a stream keeps 3 MiB at most; the rest is the allocator's high-water mark)
    assert flood_mib < quiet_mib + 100, f"peak RSS {flood_mib} MiB, {quiet_mib} MiB without"
    # unhealthy: exit 16 in one line (the flood's last words), back on the release before
    proc, fail_mib = deploy_measured(bundles["v2-floods-fails"], fault_device,
                                     tmp_path / "fails")
    assert proc.returncode == 16, proc.stderr
    line = one_line_error(proc)
    assert "the health hook exited with 1 (last words)" in line and f"back on {new}" in line
    assert fail_mib < quiet_mib + 100, f"peak RSS {fail_mib} MiB, {quiet_mib} MiB without"
    assert device.assert_current_is_a_validated_complete_release() == new
    assert ("health-failed", release_of(bundles["v2-floods-fails"])) in device.journal()
    # and the next deploy leaves nothing behind (v1 is older than v2-floods: a downgrade)
    proc = edgekit("deploy", str(bundles["v1"]), "--host", fault_device.name,
                   "--allow-downgrade")
    assert proc.returncode == 0, proc.stderr
    assert device.current() == old and device.scratch() == []
    # the unhealthy release was activated, so it is history (pruned as such), not a leftover
    assert device.releases() == {old, new, release_of(bundles["v2-floods-fails"])}


# --- two deploys at once -----------------------------------------------------------------------

def start(*args: str, cwd: Path | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "edgekit.cli.main", *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def assert_exit_0_or_superseded(proc: subprocess.Popen) -> int:
    """0, or 15 and one line: the other deploy switched `current` right after this one."""
    _, err = proc.communicate(timeout=300)
    if proc.returncode != 0:
        assert proc.returncode == 15, err
        line = one_line_error(subprocess.CompletedProcess(proc.args, 15, "", err))
        assert "another deploy of faulty switched `current` to" in line, line
    return proc.returncode


def assert_no_leftovers_after_the_next_deploy(device, fault_device, bundle: Path,
                                              releases: set[str]) -> None:
    proc = deploy(bundle, fault_device)
    assert proc.returncode == 0, proc.stderr
    assert device.current() == release_of(bundle) and device.scratch() == []
    activated = {release for event, release in device.journal() if event == "activate"}
    assert device.releases() <= releases & activated   # nothing never activated


ROUNDS = 2


@pytest.mark.parametrize("source", ["bundles", "recipes from one directory"])
def test_two_deploys_of_one_app_at_once_leave_one_complete_release_and_no_leftovers(
        bundles, device, fault_device, tmp_path, source):
    releases = {release_of(bundles["v1"]), release_of(bundles["v2"])}
    for round_ in range(ROUNDS):
        if round_ == 0 and source == "bundles":   # and both the first to a fresh device
            shutil.rmtree(cache_root() / "runtime", ignore_errors=True)
            for folder in ("runtime", "shims"):
                shutil.rmtree(fault_device.host_path(f"{fault_device.home}/.edgekit/{folder}"),
                              ignore_errors=True)
        if source == "bundles":
            procs = [start("deploy", str(bundles[v]), "--host", fault_device.name,
                           "--allow-downgrade")   # after round 0, v1 is older than v2
                     for v in ("v1", "v2")]
        else:   # both build to build/faulty-host here (a cache hit each) and ship from there
            procs = [start("deploy", "--recipe", str(bundles[v].parent / f"{v}.yaml"),
                           "--target", "host", "--host", fault_device.name,
                           "--allow-downgrade", cwd=tmp_path)
                     for v in ("v1", "v2")]
        codes = [assert_exit_0_or_superseded(proc) for proc in procs]
        assert 0 in codes, f"round {round_}: {codes}"
        assert device.assert_current_is_a_validated_complete_release() in releases
        assert all(event != "rejected" for event, _ in device.journal())
    assert_no_leftovers_after_the_next_deploy(device, fault_device, bundles["v2"], releases)


# --- disk full ----------------------------------------------------------------------------------

def tmpfs_over_apps(device, limit: str):
    """A tmpfs (`limit`: its size= or nr_inodes= option) mounted over the device user's apps
    directory, owned by that user (unmounted afterwards)."""
    apps = device.app_dir.parent
    owner = device.app_dir.parents[2].stat()   # the device user's home
    for folder in (apps.parent, apps):   # each the user's own, also on a fresh device
        subprocess.run(["install", "-d", "-o", str(owner.st_uid), "-g", str(owner.st_gid),
                        str(folder)], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"{limit},uid={owner.st_uid},"
                    f"gid={owner.st_gid},mode=0755", "tmpfs", str(apps)], check=True)
    try:
        yield apps
    finally:
        subprocess.run(["umount", "-l", str(apps)], check=False)


@pytest.fixture
def small_disk(device):
    """4 MiB for the device's apps."""
    yield from tmpfs_over_apps(device, "size=4m")


@pytest.fixture
def few_inodes(device):
    """200 inodes (files, directories, links) for the device's apps, bytes to spare."""
    yield from tmpfs_over_apps(device, "size=64m,nr_inodes=200")


def fill(folder: Path, leave_bytes: int) -> Path:
    """A file that leaves `leave_bytes` (whole pages) free on `folder`'s filesystem."""
    stat = os.statvfs(folder)
    free = stat.f_bavail * stat.f_frsize
    filler = folder / "filler"
    with filler.open("wb") as f:
        f.write(b"\0" * max(0, free - leave_bytes))
    return filler


def pages(directory: Path) -> int:
    return sum(-(-p.stat().st_size // PAGE) * PAGE for p in directory.rglob("*") if p.is_file())


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in proc.stderr and "Aborted!" not in proc.stderr, proc.stderr
    return proc.stderr.strip().splitlines()[0]


def test_a_disk_full_during_upload_is_one_typed_line_and_the_next_deploy_cleans_up(
        bundles, device, fault_device, small_disk):
    old, new = release_of(bundles["v1"]), release_of(bundles["v2"])
    assert deploy(bundles["v1"], fault_device).returncode == 0
    filler = fill(small_disk, 8 * PAGE)   # less than the module
    proc = deploy(bundles["v2"], fault_device)
    assert proc.returncode in (10, 15), proc.stderr
    line = one_line_error(proc)
    assert "upload" in line and "no space left on the device" in line, line
    assert device.current() == old and device.complete(old)
    filler.unlink()
    assert deploy(bundles["v2"], fault_device).returncode == 0
    assert device.current() == new and device.scratch() == []


def test_a_disk_full_after_the_upload_is_one_typed_line_and_leaves_no_unvalidated_release(
        bundles, device, fault_device, small_disk):
    old, new = release_of(bundles["v1"]), release_of(bundles["v2"])
    assert deploy(bundles["v1"], fault_device).returncode == 0
    # room for exactly the new release's files: its validation outputs find none
    room = pages(device.app_dir / "releases" / old)
    filler = fill(small_disk, room)
    proc = deploy(bundles["v2"], fault_device)
    assert proc.returncode == 15, proc.stderr
    assert "disk" in one_line_error(proc)
    assert device.current() == old and device.complete(old)
    assert new not in device.releases()
    filler.unlink()
    assert deploy(bundles["v2"], fault_device).returncode == 0
    assert device.current() == new and device.scratch() == []
    assert device.releases() == {old, new}


# --- inodes exhausted ---------------------------------------------------------------------------

def use_inodes(folder: Path, leave: int) -> Path:
    """Empty files in `folder`/inodes until only `leave` inodes are free on its filesystem."""
    fillers = folder / "inodes"
    fillers.mkdir()
    for i in range(max(0, os.statvfs(folder).f_favail - leave)):
        (fillers / str(i)).touch()
    assert os.statvfs(folder).f_favail == leave
    return fillers


def release_inodes(folder: Path) -> int:
    """Inodes a release takes: its directory and everything under it (golden/, its files)."""
    return 1 + sum(1 for _ in folder.rglob("*"))


# how many inodes to leave, from a release's count: one (the staging directory fits, nothing
# in it); half a release (mid-upload); a whole release and the in-flight marker, so validation
# (its directory, an output) finds none
@pytest.mark.parametrize("leave, step", [(lambda n: 1, "mkdir"), (lambda n: n // 2, "upload"),
                                         (lambda n: n + 1, "validation")],
                         ids=["staging", "mid-upload", "validation"])
def test_inodes_exhausted_during_a_deploy_are_one_typed_line_and_the_next_deploy_cleans_up(
        bundles, device, fault_device, few_inodes, leave, step):
    old, new = release_of(bundles["v1"]), release_of(bundles["v2"])
    assert deploy(bundles["v1"], fault_device).returncode == 0
    fillers = use_inodes(few_inodes, leave(release_inodes(device.app_dir / "releases" / old)))
    proc = deploy(bundles["v2"], fault_device)
    assert proc.returncode == 15, proc.stderr
    line = one_line_error(proc)
    assert step in line and "no free inodes left on the device" in line, line
    assert device.current() == old and device.complete(old)
    assert new not in device.releases() and ("rejected", new) not in device.journal()
    shutil.rmtree(fillers)
    assert deploy(bundles["v2"], fault_device).returncode == 0
    assert device.current() == new and device.scratch() == []
    assert device.releases() == {old, new}
