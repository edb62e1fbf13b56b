#!/usr/bin/env python3
"""The fabric's limits: many processes, little shared memory.

1. 130 processes on one fabric at once (more than 64 and than 128: mpirun
   -np 128 on one node) all open the device and come up.
2. A /dev/shm too small for the fabric (a container's default is 64 MiB):
   the program gets an error that names /dev/shm and what to do, instead of
   a SIGBUS later; nothing is left behind. Needs root (a private tmpfs in a
   mount namespace); skipped otherwise.

usage: fabric_size_check.py SIMVERBS_CLI FABRIC PORT
"""
import glob
import os
import subprocess
import sys
import time

cli, fabric, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
failures = []
checks = 1
PROCESSES = 130

env = dict(os.environ, SIMVERBS_FABRIC=fabric)
rings = lambda: glob.glob(f"/dev/shm/simverbs-{os.geteuid()}-{fabric}+p*")
servers = []
try:
    for i in range(PROCESSES):
        servers.append(subprocess.Popen([cli, "run", "--", "ibv_rc_pingpong", "-p", str(port + i)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env))
    # Each process that joined has a ring; one that was refused has exited with the reason.
    deadline = time.time() + 120
    while time.time() < deadline and len(rings()) < PROCESSES and all(s.poll() is None for s in servers):
        time.sleep(0.1)
    exited = [s for s in servers if s.poll() is not None]
    # The sizes of this version's objects, for the small /dev/shm below.
    segment_size = os.path.getsize(f"/dev/shm/simverbs-{os.geteuid()}-{fabric}")
    ring_size = os.path.getsize(rings()[0]) if rings() else 1 << 20
    if len(rings()) != PROCESSES or exited:
        why = exited[0].stderr.read()[-300:] if exited else ""
        failures.append(f"{len(rings())} of {PROCESSES} processes joined one fabric, {len(exited)} exited: {why!r}")
finally:
    for s in servers:
        s.kill()
    for s in servers:
        s.wait()
subprocess.run([cli, "clean"], capture_output=True, timeout=60)

if os.geteuid() != 0:
    print("SKIP small /dev/shm case: needs root for a private tmpfs")
else:
    # Too small for the segment; room for the segment but not for a ring.
    for size in (f"{segment_size // 2048}k", f"{(segment_size + ring_size // 2) // 1024}k"):
        checks += 1
        script = (f"mount -t tmpfs -o size={size} tmpfs /dev/shm && "
                  f"SIMVERBS_FABRIC={fabric}-small exec {cli} run -- ibv_devinfo")
        r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                           capture_output=True, text=True, timeout=60)
        if r.returncode < 0 or r.returncode > 128:
            failures.append(f"/dev/shm of {size}: ibv_devinfo died of a signal ({r.returncode}): {r.stderr[-300:]!r}")
        elif r.returncode == 0:
            failures.append(f"/dev/shm of {size}: ibv_devinfo succeeded, the fabric should not fit")
        elif "/dev/shm is full" not in r.stderr or "--shm-size" not in r.stderr:
            failures.append(f"/dev/shm of {size}: the error does not say what to do: {r.stderr[-400:]!r}")

for f in failures:
    print("FAIL", f)
print(f"{checks - min(len(failures), checks)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
