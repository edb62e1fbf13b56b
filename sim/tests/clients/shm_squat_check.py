#!/usr/bin/env python3
"""Another local user cannot take over a user's fabric.

An attacker (one uid) creates, mode 0666, the name a victim's (another uid)
programs would use for the fabric's shared memory, or for its first packet
ring. The victim's unmodified program (ibv_devinfo) must refuse to join with a
message that names the object, and write nothing into it.

Needs root (to run the two sides as two users, with setpriv); skipped
otherwise.

usage: shm_squat_check.py SIMVERBS_CLI FABRIC PORT
"""
import glob
import hashlib
import os
import subprocess
import sys
import time

cli, fabric, port = os.path.abspath(sys.argv[1]), sys.argv[2], sys.argv[3]
if os.geteuid() != 0:
    print("SKIP: needs root, to run an attacker and a victim as two users")
    sys.exit(77)

ATTACKER, VICTIM = 40001, 40002
segment = f"/dev/shm/simverbs-{VICTIM}-{fabric}"
failures = []


def as_user(uid, argv, **kw):
    return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"] + argv,
                          capture_output=True, text=True, timeout=60, **kw)


# Both users run the build's own programs: a build tree another user cannot enter (under /root, mode 0700,
# say) cannot be tested this way.
probe = as_user(ATTACKER, [cli, "devices"], cwd="/")
if probe.returncode != 0:
    print(f"SKIP: uid {ATTACKER} cannot run {cli} ({(probe.stderr or probe.stdout).strip()[:200]}); "
          "build in a directory other users can read to run this check")
    sys.exit(77)


def cleanup():
    for path in glob.glob(f"/dev/shm/simverbs-{VICTIM}-{fabric}*") + glob.glob(f"/dev/shm/simverbs-{ATTACKER}-{fabric}*"):
        os.unlink(path)


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def squat_with_a_real_fabric(path):
    """As the attacker: a copy of a live fabric segment of its own (right size, magic and lock), mode 0666,
    under the victim's name: what a victim that does not check owner and mode joins without noticing."""
    env = dict(os.environ, SIMVERBS_FABRIC=fabric)
    server = subprocess.Popen(["setpriv", f"--reuid={ATTACKER}", f"--regid={ATTACKER}", "--clear-groups", "--",
                               cli, "run", "--", "ibv_rc_pingpong", "-p", port],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd="/")
    own = f"/dev/shm/simverbs-{ATTACKER}-{fabric}"
    try:
        deadline = time.time() + 20
        while time.time() < deadline and not os.path.exists(own + "+p0"):
            time.sleep(0.05)
        if not os.path.exists(own + "+p0"):
            raise SystemExit(f"the attacker's own fabric {own} did not appear")
        r = as_user(ATTACKER, [sys.executable, "-c",
                               f"import os, shutil; fd = os.open({path!r}, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o666); "
                               f"os.fchmod(fd, 0o666); shutil.copyfileobj(open({own!r}, 'rb'), os.fdopen(fd, 'wb'))"])
        if r.returncode != 0:
            raise SystemExit(f"could not create {path} as uid {ATTACKER}: {r.stderr}")
    finally:
        server.kill()
        server.wait()


def squat(path):
    # As the attacker: a world-readable, world-writable object, whatever the umask.
    r = as_user(ATTACKER, [sys.executable, "-c",
                           f"import os; fd = os.open({path!r}, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o666); "
                           f"os.fchmod(fd, 0o666)"])
    if r.returncode != 0:
        raise SystemExit(f"could not create {path} as uid {ATTACKER}: {r.stderr}")


def victim():
    env = dict(os.environ, SIMVERBS_FABRIC=fabric)
    return as_user(VICTIM, [cli, "run", "--", "ibv_devinfo"], env=env, cwd="/")


cleanup()
try:
    # 1. The fabric's segment itself.
    squat_with_a_real_fabric(segment)
    before = digest(segment)
    r = victim()
    if r.returncode == 0:
        failures.append(f"the victim joined a fabric whose segment uid {ATTACKER} created: {r.stdout[-300:]!r}")
    elif segment not in r.stderr or f"belongs to uid {ATTACKER}" not in r.stderr:
        failures.append(f"the refusal does not name the object and its owner: {r.stderr!r}")
    if digest(segment) != before:
        failures.append(f"the victim wrote into the attacker's {segment}")
    cleanup()

    # 2. The victim's first packet ring (its segment is made fresh, but the ring's name is taken).
    ring = segment + "+p0"
    squat(ring)
    r = victim()
    if r.returncode == 0:
        failures.append(f"the victim joined with a packet ring uid {ATTACKER} created: {r.stdout[-300:]!r}")
    elif ring not in r.stderr:
        failures.append(f"the refusal does not name the ring: {r.stderr!r}")
    if os.path.getsize(ring) != 0:
        failures.append(f"the victim wrote into the attacker's {ring}")
    left = [p for p in glob.glob(f"/dev/shm/simverbs-{VICTIM}-{fabric}*") if p != ring]
    if left:
        failures.append(f"the refused victim left {left}")
    cleanup()

    # 3. With nothing squatted, the same victim joins (the refusals above were not for another reason).
    r = victim()
    if r.returncode != 0 or "sim0" not in r.stdout:
        failures.append(f"the victim cannot use its own fabric: {r.stderr!r}")
finally:
    cleanup()

for f in failures:
    print("FAIL", f)
print(f"{3 - min(len(failures), 3)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
