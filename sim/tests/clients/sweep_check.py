#!/usr/bin/env python3
"""What a fabric whose last process was killed leaves in /dev/shm is removed:
by `simverbs clean`, and by the next program of the same user that opens a
device on any fabric, whatever was written into its segment. A fabric with a
live process is kept (whatever its name: "<fabric>-p1" was taken for a ring),
and so is one of a version that kept its processes' liveness in the segment
(up to "SIMFABR4"), and one whose lock another process holds (reported as
such once clean has waited for it a bounded time). A fabric name too long for its rings' names is refused.

usage: sweep_check.py SIMVERBS_CLI FABRIC PORT
"""
import fcntl
import glob
import os
import signal
import struct
import subprocess
import sys
import threading
import time

cli, fabric, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
failures = []


def objects(name):
    return sorted(glob.glob(f"/dev/shm/simverbs-{os.geteuid()}-{name}") +
                  glob.glob(f"/dev/shm/simverbs-{os.geteuid()}-{name}+p*"))


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


def segment(name):
    return f"/dev/shm/simverbs-{os.geteuid()}-{name}"


def overwrite_header(name, magic, ready):
    """Writes the segment's magic (None: keeps this version's) and ready flag, as a stray write or another
    version would."""
    with open(segment(name), "r+b") as f:
        if magic is None:
            (magic,) = struct.unpack("<Q", f.read(8))
            f.seek(0)
        f.write(struct.pack("<QI", magic, ready))
    return magic


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

def live_fabric_kept(name, p, what):
    """A fabric with a live process, `name`, is kept by simverbs clean and by a program that opens a device on
    another fabric; returns what simverbs clean printed."""
    server = start_server(name, p)
    try:
        live = objects(name)
        r = subprocess.run([cli, "clean"], capture_output=True, text=True, timeout=60)
        if objects(name) != live:
            failures.append(f"simverbs clean removed part of {what}: {live} -> {objects(name)}")
        subprocess.run([cli, "run", "--", "ibv_devinfo"], capture_output=True, timeout=60,
                       env=dict(os.environ, SIMVERBS_FABRIC=fabric + "-c"))
        if objects(name) != live:
            failures.append(f"a program on another fabric removed part of {what}: {objects(name)}")
        return r.stdout
    finally:
        server.kill()
        server.wait()


# 3. A fabric with a live process is kept, by both.
cleaned = live_fabric_kept(fabric + "-d", port + 2, "a live fabric")
if f'kept fabric "{fabric}-d" (1 process)' not in cleaned:
    failures.append(f"simverbs clean did not say it kept the live fabric: {cleaned!r}")

# 4. A dead fabric is removed whatever its header says: garbage over the magic
# or over its version byte alone, a later version's magic (every version since
# "SIMFABR5" holds kernel locks while attached), or a creator that died before
# marking it ready.
for n, (suffix, magic, ready) in enumerate((("-e", 0x0123456789ABCDEF, 0xDEADBEEF), ("-f", None, 0),
                                            ("-i", 0x53494D46414252A7, 1), ("-j", 0x53494D464142525A, 1))):
    left = killed_fabric(fabric + suffix, port + (3 if n == 0 else 5 + n))
    magic = overwrite_header(fabric + suffix, magic, ready)
    r = subprocess.run([cli, "clean"], capture_output=True, text=True, timeout=60)
    if objects(fabric + suffix):
        failures.append(f"simverbs clean left a dead fabric with magic {magic:#x}, ready {ready}: "
                        f"{objects(fabric + suffix)} ({r.stdout!r} {r.stderr!r})")

# 5. A live fabric is kept whatever its header says (its process holds its lock).
server = start_server(fabric + "-g", port + 4)
try:
    live = objects(fabric + "-g")
    overwrite_header(fabric + "-g", 0x0123456789ABCDEF, 0)
    r = subprocess.run([cli, "clean"], capture_output=True, text=True, timeout=60)
    if objects(fabric + "-g") != live:
        failures.append(f"simverbs clean removed part of a live fabric with a garbage header: {live} -> "
                        f"{objects(fabric + '-g')}")
    if f'kept fabric "{fabric}-g" (1 process)' not in r.stdout:
        failures.append(f"simverbs clean did not say it kept the live fabric with a garbage header: {r.stdout!r}")
finally:
    server.kill()
    server.wait()

# 6. A fabric of a version that kept liveness in the segment is not ours to judge.
killed_fabric(fabric + "-h", port + 5)
overwrite_header(fabric + "-h", 0x53494D4641425233, 1)  # "SIMFABR3"
subprocess.run([cli, "clean"], capture_output=True, timeout=60)
if not os.path.exists(segment(fabric + "-h")):
    failures.append("simverbs clean removed another version's fabric")
os.unlink(segment(fabric + "-h"))
subprocess.run([cli, "clean"], capture_output=True, timeout=60)

# 7. A live fabric whose name ends as a ring's did ("<fabric>-p<slot>") is kept, by both, when no fabric of
# the shorter name is there (its segment was taken for a ring of that fabric, and removed).
live_fabric_kept(fabric + "-p1", port + 9, "a live fabric named like a ring")
subprocess.run([cli, "clean"], capture_output=True, timeout=60)

# 8. A fabric name too long for its rings' names is refused at ibv_open_device, saying how long it may be.
r = subprocess.run([cli, "run", "--", "ibv_devinfo"], capture_output=True, text=True, timeout=60,
                   env=dict(os.environ, SIMVERBS_FABRIC="x" * 240))
if r.returncode == 0 or "too long (at most" not in r.stderr:
    failures.append(f"a 240-character fabric name was not refused as too long: {r.stdout[-200:]!r} "
                    f"{r.stderr[-300:]!r}")

# 9. A live fabric whose lock another process holds (every program of the user that opens a device takes each
# fabric's lock for a moment, to judge it) is still reported as kept: clean waits for the lock, a bounded time.
def take_lock(f, within=10.0):
    """Takes the fabric's lock, which any program that opens a device (the server, another test's) may hold
    for a moment; an error if it stays held `within` seconds."""
    deadline = time.time() + within
    while True:
        try:
            fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
            return
        except BlockingIOError:
            if time.time() > deadline:
                raise RuntimeError(f"the lock of fabric {fabric}-k stayed held for {within} s")
            time.sleep(0.01)


server = start_server(fabric + "-k", port + 10)
try:
    live = objects(fabric + "-k")
    with open(segment(fabric + "-k"), "r+b") as f:
        take_lock(f)
        release = threading.Timer(0.3, lambda: fcntl.lockf(f, fcntl.LOCK_UN, 1, 0))
        release.start()
        r = subprocess.run([cli, "clean"], capture_output=True, text=True, timeout=60)
        release.join()
        if f'kept fabric "{fabric}-k" (1 process)' not in r.stdout:
            failures.append(f"simverbs clean did not report a live fabric whose lock was held for 0.3 s: {r.stdout!r}")
        # Held for longer than clean waits: kept, and said why it was not judged.
        take_lock(f)
        r = subprocess.run([cli, "clean"], capture_output=True, text=True, timeout=60)
        fcntl.lockf(f, fcntl.LOCK_UN, 1, 0)
        if f'kept fabric "{fabric}-k" (its lock is held)' not in r.stdout:
            failures.append(f"simverbs clean did not report a fabric whose lock stayed held: {r.stdout!r}")
    if objects(fabric + "-k") != live:
        failures.append(f"simverbs clean removed part of a live fabric whose lock was held: {objects(fabric + '-k')}")
finally:
    server.kill()
    server.wait()

for f in failures:
    print("FAIL", f)
print(f"{9 - min(len(failures), 9)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
