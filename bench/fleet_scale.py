#!/usr/bin/env python3
"""Fleet scale: what a `fleet update` costs the controller as the fleet grows.

Three measurements, each in a fresh process (so RSS is that of the rollout alone):

1. SIMULATED devices (bench/fleet_sim.py: devices that answer from memory — the controller's
   own cost, nothing else) at 1,000 and 10,000 devices: a first update and a second update of
   the same release; wall time, controller CPU per device, peak RSS, journal bytes, waves, and
   the time the waves alone would take (each device command sleeps `--latency-ms`, standing for
   the device's own work; concurrency devices at a time).
2. REAL `local:` fleets (directories on this machine running the real shims and IREE tools)
   of 50 and 500 devices: first and second update, wall and per device.
3. SSH connection set-up to a real lab device (sshd on 127.0.0.x) with 1 and with 10,000
   pinned host keys: edgekit's index against paramiko's own reader (`load_host_keys` per
   connection, what edgekit did before and what a plain paramiko script does), measured in the
   same run at 1,000 and 2,000 keys (at 10,000 it takes about a minute per connection).

The simulated devices run in the controller's process: the CPU their own Python takes is
measured per thread and reported apart ("sim CPU"), not as the controller's.

    python3 bench/fleet_scale.py                       # all three (~10 min here)
    python3 bench/fleet_scale.py --sim 1000,10000 --local 50 --no-ssh

It ends with the growth law fitted to the simulated runs (wall = a + b·N) and each target of
the scale work checked: CPU ≤ 5 ms per device and RSS ≤ 300 MiB at 10,000 devices, and wall
time within 25 % of the waves' own duration.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
RECIPE = ROOT / "recipes" / "kws_mlp.yaml"


def _fleet_file(folder: Path, count: int, waves: str, concurrency: int) -> Path:
    lines = ["devices:"] + [f"  d{i}: {{host: 'local:devices/d{i}', target: host}}"
                            for i in range(count)]
    path = folder / "fleet.yaml"
    path.write_text("\n".join(lines) + f"\nrollout: {{canary: 1, waves: [{waves}], "
                    f"concurrency: {concurrency}}}\n")
    return path


def _bundle(out: Path):
    from edgekit.api.build import BuildOptions, build
    return build(BuildOptions(recipe=RECIPE, target="host", out=out)).bundle


def _probe_stdout(folder: Path) -> bytes:
    """What the real probe prints on this machine (the simulated devices repeat it)."""
    from edgekit.device.probe import probe
    from edgekit.transport.local import LocalTransport
    seen: list[bytes] = []

    class Recording(LocalTransport):
        def run(self, argv, **kw):
            result = super().run(argv, **kw)
            if list(argv[:3]) == ["sh", "-s", "--"]:
                seen.append(result.stdout)
            return result
    (folder / "probe").mkdir()
    with Recording(folder / "probe") as conn:
        probe(conn)
    return seen[0]


def one_run(kind: str, count: int, args) -> dict:
    """Two updates of one release to `count` devices, in this process; returns figures."""
    os.environ["EDGEKIT_PROGRESS"] = "none"
    folder = Path(tempfile.mkdtemp(prefix="edgekit-fleet-scale-"))
    os.environ["EDGEKIT_HOME"] = str(Path(args.cache) / "home")   # the bundle's signer's
    try:
        from edgekit.fleet import rollout
        from edgekit.fleet.rollout import UpdateOptions, update
        from edgekit.models.bundle import load_bundle
        bundle = load_bundle(Path(args.cache) / "bundle")     # built by the parent
        fleet = _fleet_file(folder, count, args.waves, args.concurrency)
        if kind == "sim":
            from fleet_sim import SimulatedDevice, SimulatedTransport
            stdout = _probe_stdout(folder)
            devices = {f"{folder}/devices/d{i}": SimulatedDevice(f"d{i}", stdout,
                                                                 args.latency_ms / 1e3)
                       for i in range(count)}
            rollout.open_device = lambda address, identity=None, timeouts=None: \
                SimulatedTransport(devices[address.removeprefix("local:")])
        else:
            for i in range(count):
                (folder / "devices" / f"d{i}").mkdir(parents=True)
        figures: dict = {"kind": kind, "devices": count}
        for label in ("first", "second"):
            if kind == "sim":
                from fleet_sim import SIM_CPU
                SIM_CPU[0] = 0.0
            cpu, wall = time.process_time(), time.perf_counter()
            result = update(UpdateOptions(fleet=fleet, recipe=RECIPE),
                            build_for=lambda target: bundle)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            statuses = {s: sum(d.status == s for d in result.devices)
                        for s in ("updated", "unchanged", "failed")}
            journal = Path(result.journal)
            figures[label] = {"status": result.status, "wall_s": round(wall, 2),
                              "cpu_ms_per_device": round(1e3 * cpu / count, 3),
                              "journal_bytes": journal.stat().st_size,
                              "waves": len(result.waves),
                              "wave_sizes": [len(w.devices) for w in result.waves],
                              **statuses,
                              "failures": sorted({d.reason[:200] for d in result.devices
                                                  if d.status == "failed"})[:5]}
            if kind == "sim":
                # the simulated devices' own Python is not the controller's
                figures[label]["sim_cpu_ms_per_device"] = round(1e3 * SIM_CPU[0] / count, 3)
                figures[label]["cpu_ms_per_device"] = round(1e3 * (cpu - SIM_CPU[0]) / count,
                                                            3)
                commands = sum(d.commands for d in devices.values())
                for d in devices.values():
                    d.commands = 0
                # the waves' own duration: each wave's devices `concurrency` at a time, each
                # taking its commands × latency
                per_device = commands / count * args.latency_ms / 1e3
                figures[label]["commands_per_device"] = round(commands / count, 1)
                figures[label]["waves_own_s"] = round(sum(
                    -(-len(w.devices) // args.concurrency) * per_device
                    for w in result.waves), 2)
        figures["rss_mib"] = _peak_rss_mib()
        return figures
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(Path(args.cache) / "home" / "fleet", ignore_errors=True)


def _peak_rss_mib() -> float:
    """This process's peak RSS (VmHWM: getrusage's maxrss would include the parent's from
    before exec, torch and all)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _in_subprocess(kind: str, count: int, args) -> dict:
    argv = [sys.executable, __file__, "--one", f"{kind}:{count}", "--cache", args.cache,
            "--waves", args.waves, "--concurrency", str(args.concurrency),
            "--latency-ms", str(args.latency_ms)]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    if proc.returncode != 0:
        raise SystemExit(f"{kind} {count}: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def ssh_setup(args) -> dict:
    """Connection set-up to a lab device with 1 and 10,000 pinned keys (edgekit) and with
    1,000 and 2,000 (paramiko's reader, the peer)."""
    import paramiko

    from edgekit.config.devices import resolve_device
    from edgekit.config.paths import known_hosts_path
    from edgekit.transport.ssh import connect
    home = Path(tempfile.mkdtemp(prefix="edgekit-ssh-scale-"))
    os.environ["EDGEKIT_HOME"] = str(home)
    edgekit = [sys.executable, "-m", "edgekit"]
    up = subprocess.run([*edgekit, "lab", "up", "--name", "scale-ssh", "--json"],
                        capture_output=True, text=True)
    if up.returncode != 0:
        raise SystemExit(f"lab up: {up.stderr}")
    try:
        address, key = resolve_device("scale-ssh")
        own = known_hosts_path().read_text()
        blob = own.split()[2]

        def with_keys(n: int) -> None:
            known_hosts_path().write_text(own + "".join(
                f"[10.{i // 62500}.{i // 250 % 250}.{i % 250}]:22 ssh-ed25519 {blob}\n"
                for i in range(n - 1)))

        def median_connect(peer: bool, n: int = 5) -> float:
            times = []
            for _ in range(n):
                started = time.perf_counter()
                if peer:    # what edgekit did before: the whole file through paramiko
                    client = paramiko.SSHClient()
                    client.load_host_keys(str(known_hosts_path()))
                    client.set_missing_host_key_policy(paramiko.RejectPolicy())
                    client.connect(address.host, port=address.port,
                                   username=address.user, key_filename=str(key),
                                   allow_agent=False, look_for_keys=False)
                    client.close()
                else:
                    with connect(address, key):
                        pass
                times.append(time.perf_counter() - started)
            return sorted(times)[len(times) // 2]

        figures = {}
        for keys in (1, 10_000):
            with_keys(keys)
            median_connect(False, 1)           # the index is built once per file version
            figures[f"edgekit_{keys}_keys_s"] = round(median_connect(False), 4)
        for keys in (1, 1_000, 2_000):
            with_keys(keys)
            figures[f"paramiko_{keys}_keys_s"] = round(median_connect(True, 3), 4)
        known_hosts_path().write_text(own)
        return figures
    finally:
        subprocess.run([*edgekit, "lab", "down"], capture_output=True)
        shutil.rmtree(home, ignore_errors=True)


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    import numpy as np
    n, y = np.array([p[0] for p in points], float), np.array([p[1] for p in points], float)
    b, a = np.polyfit(n, y, 1) if len(points) > 1 else (y[0] / n[0], 0.0)
    return float(a), float(b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sim", default="1000,10000", help="simulated fleet sizes")
    parser.add_argument("--local", default="50,500", help="real local: fleet sizes")
    parser.add_argument("--no-ssh", action="store_true", help="skip the SSH set-up figures")
    parser.add_argument("--waves", default="10%, 50%, 100%", help="wave sizes after the canary")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--latency-ms", type=float, default=10.0,
                        help="simulated devices: time each command takes on the device")
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) /
                                               "edgekit-fleet-scale-cache"))
    parser.add_argument("--json", type=Path, help="also write every figure here")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        kind, count = args.one.split(":")
        print(json.dumps(one_run(kind, int(count), args)))
        return
    Path(args.cache).mkdir(parents=True, exist_ok=True)
    os.environ["EDGEKIT_HOME"] = str(Path(args.cache) / "home")
    _bundle(Path(args.cache) / "bundle")      # here: the rollouts' RSS is the controller's
    runs = [_in_subprocess("sim", int(n), args) for n in args.sim.split(",") if n]
    runs += [_in_subprocess("local", int(n), args) for n in args.local.split(",") if n]
    print("ctl CPU: the controller's CPU per device (the simulated devices' own excluded, "
          "shown as 'sim CPU')")
    print(f"{'kind':<6} {'devices':>7} {'update':<7} {'wall s':>8} {'ctl CPU ms/dev':>15} "
          f"{'waves':>5} {'waves own s':>11} {'journal KiB':>11} {'RSS MiB':>8}  statuses")
    for r in runs:
        for label in ("first", "second"):
            f = r[label]
            own = f"{f['waves_own_s']:.1f}" if "waves_own_s" in f else "-"
            print(f"{r['kind']:<6} {r['devices']:>7} {label:<7} {f['wall_s']:>8.2f} "
                  f"{f['cpu_ms_per_device']:>15.2f} {f['waves']:>5} {own:>11} "
                  f"{f['journal_bytes'] / 1024:>11.1f} {r['rss_mib']:>8.1f}  "
                  f"{f['updated']} updated, {f['unchanged']} unchanged, {f['failed']} failed"
                  + (f"; sim CPU {f['sim_cpu_ms_per_device']:.2f} ms/dev"
                     if "sim_cpu_ms_per_device" in f else ""))
            for reason in f.get("failures", []):
                print(f"{'':>24}failed: {reason}")
    figures: dict = {"runs": runs}
    sims = [r for r in runs if r["kind"] == "sim"]
    if sims:
        a, b = fit([(r["devices"], r["first"]["wall_s"]) for r in sims])
        ca, cb = fit([(r["devices"], r["first"]["cpu_ms_per_device"] * r["devices"] / 1e3)
                      for r in sims])
        print(f"\ngrowth law (simulated, first update): wall ≈ {a:.2f} s + {1e3 * b:.2f} ms·N; "
              f"controller CPU ≈ {ca:.2f} s + {1e3 * cb:.3f} ms·N")
        largest = max(sims, key=lambda r: r["devices"])
        f = largest["first"]
        checks = [("controller CPU per device ≤ 5 ms", f["cpu_ms_per_device"] <= 5.0,
                   f"{f['cpu_ms_per_device']:.2f} ms"),
                  ("RSS ≤ 300 MiB", largest["rss_mib"] <= 300, f"{largest['rss_mib']} MiB"),
                  ("wall within 25 % of the waves' own time",
                   f["wall_s"] <= 1.25 * f["waves_own_s"],
                   f"{f['wall_s']:.1f} s vs {f['waves_own_s']:.1f} s")]
        print(f"targets at {largest['devices']:,} simulated devices:")
        for name, ok, value in checks:
            print(f"  {'ok  ' if ok else 'MISS'} {name}: {value}")
        figures["growth"] = {"wall_a_s": a, "wall_b_ms_per_device": 1e3 * b}
    for r in (r for r in runs if r["kind"] == "local"):
        ratio = r["second"]["wall_s"] / r["first"]["wall_s"]
        print(f"local {r['devices']}: second update {100 * ratio:.1f} % of the first "
              f"({r['second']['wall_s']:.1f} s vs {r['first']['wall_s']:.1f} s)")
    if not args.no_ssh:
        ssh = ssh_setup(args)
        figures["ssh"] = ssh
        print("\nSSH connection set-up, median (lab device on 127.0.0.x):")
        for name, value in ssh.items():
            print(f"  {name:<28} {1e3 * value:8.1f} ms")
        ratio = ssh["edgekit_10000_keys_s"] / ssh["edgekit_1_keys_s"]
        print(f"  edgekit, 10,000 keys vs 1: ×{ratio:.2f}  (target ≤ ×1.10); paramiko's reader, "
              f"2,000 keys vs 1: ×{ssh['paramiko_2000_keys_s'] / ssh['paramiko_1_keys_s']:.1f}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
