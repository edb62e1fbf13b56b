#!/usr/bin/env python3
"""What a fabric whose last process was killed leaves in /dev/shm is removed:
by `simverbs clean`, and by the next program of the same user that opens a
device on any fabric. A fabric with a live process is kept.

usage: sweep_check.py SIMVERBS_CLI FABRIC PORT
"""
import glob
import os
import signal
import subprocess
import sys
import time

cli, fabric, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
failures = []


def objects(name):
    return sorted(glob.glob(f"/dev/shm/simverbs-{os.geteuid()}-{name}") +
                  glob.glob(f"/dev/shm/simverbs-{os.geteuid()}-{name}-p*"))


def start_server(name, p):
    """A process that has opened a device and registered memory, waiting for a client."""
    server = subprocess.Popen([cli, "run", "--", "ibv_rc_pingpong", "-p", str(p)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env=dict(os.environ, SIMVERBS_FABRIC=name))
    deadline = time.time() + 10
    while time.time() < deadline and len(objects(name)) < 2:
        time.sleep(0.02)
    return server


def killed_fabric(name, p):
    server = start_server(name, p)
    server.send_signal(signal.SIGKILL)
    server.wait()
    left = objects(name)
    if len(left) < 2:
        raise SystemExit(f"a killed last process should leave its fabric behind; found {left}")
    return left


# 1. simverbs clean removes a dead fabric and says what it removed.
left = killed_fabric(fabric + "-a", port)
r = subprocess.run([cli, "clean"], capture_output=True, text=True, timeout=60)
if objects(fabric + "-a"):
    failures.append(f"simverbs clean left {objects(fabric + '-a')}")
if r.returncode != 0 or not all(f"removed {path}" in r.stdout for path in left):
    failures.append(f"simverbs clean did not report removing {left}: {r.stdout!r} {r.stderr!r}")

# 2. So does any program that opens a device on another fabric.
killed_fabric(fabric + "-b", port + 1)
r = subprocess.run([cli, "run", "--", "ibv_devinfo"], capture_output=True, text=True, timeout=60,
                   env=dict(os.environ, SIMVERBS_FABRIC=fabric + "-c"))
if r.returncode != 0:
    failures.append(f"ibv_devinfo failed: {r.stderr!r}")
if objects(fabric + "-b"):
    failures.append(f"opening a device on another fabric did not sweep the dead one: {objects(fabric + '-b')}")

# 3. A fabric with a live process is kept, by both.
server = start_server(fabric + "-d", port + 2)
try:
    live = objects(fabric + "-d")
    r = subprocess.run([cli, "clean"], capture_output=True, text=True, timeout=60)
    if objects(fabric + "-d") != live:
        failures.append(f"simverbs clean removed part of a live fabric: {live} -> {objects(fabric + '-d')}")
    if f'kept fabric "{fabric}-d" (1 process)' not in r.stdout:
        failures.append(f"simverbs clean did not say it kept the live fabric: {r.stdout!r}")
    subprocess.run([cli, "run", "--", "ibv_devinfo"], capture_output=True, timeout=60,
                   env=dict(os.environ, SIMVERBS_FABRIC=fabric + "-c"))
    if objects(fabric + "-d") != live:
        failures.append(f"a program on another fabric removed part of a live one: {objects(fabric + '-d')}")
finally:
    server.kill()
    server.wait()
subprocess.run([cli, "clean"], capture_output=True, timeout=60)

for f in failures:
    print("FAIL", f)
print(f"{3 - min(len(failures), 3)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
