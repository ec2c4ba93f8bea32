#!/usr/bin/env python3
"""Channel scale: N `local:` devices running the real pull agent (agent.sh: curl, ssh-keygen
-Y verify, install_bundle.sh with validation on the device) against one real nginx.

1. install: `edgekit agent install` on every device (runtime, shims, signers, agent).
2. first rollout: v1 published at 100 %; every device polls once — each fetches the whole
   release, validates it and activates it.
3. phased rollout: v2 published with --percent 10,50,100 --max-fail 5%; rounds of "every
   device polls, then `channel promote`" until the last step; every device must end on v2.
   Content addressing: a device fetches only the files it lacks (v2, the recipe with another
   seed, changes the golden files; the module is the same file and is not fetched again).

Wall time of each phase, requests and bytes nginx served (its access log), bytes per device.
The polls run `--concurrency` at a time (each is a shell process and an iree-run-module run:
the host's CPUs bound it, not the server).

    python3 bench/channel_scale.py                      # 200 devices
    python3 bench/channel_scale.py --devices 20 --json

Measured (2026-12-02, this repository's CI machine: 2 cores shared with other jobs, load
average 15-21 during the run; kws_mlp for host, a 1,069.8 kB release of 13 files):

    200 local: agents, one nginx, 16 polls at a time
    install: 13.5 s
    first rollout (100 %): 166.9 s, 3200 requests, 214.32 MB served = 1071.6 kB per device
      (release 1069.8 kB), 0 failed
    phased rollout 10,50,100: 156.9 s in 3 rounds, 4000 requests, 3.52 MB served = 17.6 kB
      per device (release 1069.8 kB, changed files 12.2 kB); 200/200 on the new release
      at 10 %: raised, at 50 %: raised, at 100 %: complete (0 failed polls)

The wall time is the devices' own work (per poll: two ssh-keygen runs, verify.sh, three
validation samples through iree-run-module and the comparison) on two loaded cores; nginx
served 7,200 requests without an error. Per device and rollout the server moved the release
once (first) or only the changed files plus one ~1.8 kB signed index per poll (phased).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RECIPE = ROOT / "recipes" / "kws_mlp.yaml"


def _served(web, since: int) -> tuple[int, int]:
    lines = web.log_lines()[since:]
    return len(lines), sum(int(ln[3]) for ln in lines if len(ln) >= 4 and ln[3].isdigit())


def _poll_all(devices: list[Path], concurrency: int) -> list[tuple[int, str]]:
    from edgekit.channel.agent import AGENT_DIR

    def one(home: Path) -> tuple[int, str]:
        done = subprocess.run(["sh", str(home / AGENT_DIR / "agent.sh"), "poll"], cwd=home,
                              env={**os.environ, "HOME": str(home)}, capture_output=True,
                              text=True, timeout=600)
        return done.returncode, done.stderr[-300:]
    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(one, devices))


def run(count: int, concurrency: int, work: Path) -> dict:
    from edgekit.api.build import BuildOptions, build
    from edgekit.channel.agent import install_agent
    from edgekit.channel.publish import promote, publish
    from edgekit.lab.nginx import Nginx
    from edgekit.transport.local import LocalTransport

    v2_recipe = work / "kws_mlp_v2.yaml"
    v2_recipe.write_text(RECIPE.read_text().replace("seed: 0", "seed: 1"))
    v1 = build(BuildOptions(recipe=RECIPE, target="host", out=work / "v1")).bundle
    v2 = build(BuildOptions(recipe=v2_recipe, target="host", out=work / "v2")).bundle
    site = work / "site"
    site.mkdir()
    channel = site / "stable"
    result: dict = {"devices": count, "concurrency": concurrency}
    with Nginx(site, work / "nginx", workers=2) as web:
        url = f"{web.url}/stable"
        first = publish(v1.path, channel)
        homes = [work / "devices" / f"d{i:04d}" for i in range(count)]
        started = time.perf_counter()

        def install(home: Path) -> None:
            home.mkdir(parents=True)
            install_agent(LocalTransport(home), url, home.name, timer="none")
        with ThreadPoolExecutor(min(concurrency, 8)) as pool:
            list(pool.map(install, homes))
        result["install_s"] = round(time.perf_counter() - started, 1)

        mark = len(web.log_lines())
        started = time.perf_counter()
        polls = _poll_all(homes, concurrency)
        failed = [err for code, err in polls if code != 0]
        requests, served = _served(web, mark)
        result["first"] = {"seconds": round(time.perf_counter() - started, 1),
                           "requests": requests, "bytes": served,
                           "release_bytes": first.index.total_bytes, "failed": len(failed),
                           "errors": failed[:3]}

        second = publish(v2.path, channel, steps=(10, 50, 100), max_fail="5%")
        changed = {f.sha256 for f in second.index.files} - {f.sha256 for f in first.index.files}
        mark = len(web.log_lines())
        started = time.perf_counter()
        rounds, steps = 0, []
        while True:
            rounds += 1
            polls = _poll_all(homes, concurrency)
            change = promote(channel)
            steps.append({"percent": change.previous.percent, "action": change.action,
                          "failed_polls": sum(code != 0 for code, _ in polls)})
            if change.action in ("complete", "paused") or rounds > 6:
                break
        requests, served = _served(web, mark)
        on_v2 = sum((h / ".edgekit/apps/kws-mlp/current").readlink().name ==
                    second.index.release for h in homes)
        result["phased"] = {
            "seconds": round(time.perf_counter() - started, 1), "rounds": rounds,
            "steps": steps, "requests": requests, "bytes": served,
            "release_bytes": second.index.total_bytes,
            "changed_bytes": sum(f.size for f in second.index.files if f.sha256 in changed),
            "devices_on_new_release": on_v2, "final": change.action}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="edgekit-channel-scale-") as tmp:
        r = run(args.devices, args.concurrency, Path(tmp))
    if args.json:
        print(json.dumps(r, indent=2))
        return
    n = r["devices"]
    f, p = r["first"], r["phased"]
    print(f"{n} local: agents, one nginx, {r['concurrency']} polls at a time")
    print(f"install: {r['install_s']} s")
    print(f"first rollout (100 %): {f['seconds']} s, {f['requests']} requests, "
          f"{f['bytes'] / 1e6:.2f} MB served = {f['bytes'] / n / 1e3:.1f} kB per device "
          f"(release {f['release_bytes'] / 1e3:.1f} kB), {f['failed']} failed")
    print(f"phased rollout 10,50,100: {p['seconds']} s in {p['rounds']} rounds, "
          f"{p['requests']} requests, {p['bytes'] / 1e6:.2f} MB served = "
          f"{p['bytes'] / n / 1e3:.1f} kB per device (release {p['release_bytes'] / 1e3:.1f} "
          f"kB, changed files {p['changed_bytes'] / 1e3:.1f} kB); "
          f"{p['devices_on_new_release']}/{n} on the new release; {p['final']}")
    for s in p["steps"]:
        print(f"  at {s['percent']} %: {s['action']} ({s['failed_polls']} failed polls)")


if __name__ == "__main__":
    main()
