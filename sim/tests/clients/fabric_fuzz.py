#!/usr/bin/env python3
"""Fabric fuzz: another process of the same user writes garbage into a live
fabric's shared memory (its segment and packet rings) while two unmodified
programs run traffic through it.

Every value the simulator reads from shared memory must be checked before it
is used and every wait on another process must be bounded, so whatever is
written: no program crashes (dies of a signal), none hangs beyond a watchdog,
and the active side's work requests all complete (perftest exits, with or
without an error status). The programs are ib_write_bw and ib_read_bw, whose
server is passive (it waits on its TCP socket), so the only thing that can
keep a program waiting is a work request that never completes.

Seeded: the same seed writes the same bytes at the same offsets (the timing
of the programs differs from run to run).

usage: fabric_fuzz.py SIMVERBS_CLI FABRIC PORT [--seconds S] [--seed N]
"""
import argparse
import glob
import mmap
import os
import random
import signal
import subprocess
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("cli")
parser.add_argument("fabric")
parser.add_argument("port", type=int)
parser.add_argument("--seconds", type=float, default=20.0, help="total time budget")
parser.add_argument("--seed", type=int, default=None)
parser.add_argument("--watchdog", type=float, default=60.0, help="seconds one run may take")
args = parser.parse_args()
seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
rng = random.Random(seed)
failures = []
flips = runs = errored = 0
start = time.time()
print(f"fabric-fuzz: seed {seed} (replay: {' '.join(sys.argv[:4])} --seed {seed} --seconds {args.seconds})")


def objects(name):
    return sorted(glob.glob(f"/dev/shm/simverbs-{os.geteuid()}-{name}") +
                  glob.glob(f"/dev/shm/simverbs-{os.geteuid()}-{name}+p*"))


def flip_some(name, count):
    """Writes `count` random bytes into the fabric's objects: half into the segment's header and process
    table and the rings' heads and first slots (what is read most), half anywhere."""
    global flips
    paths = [p for p in objects(name) if "-mr+" not in p]
    for _ in range(count):
        if not paths:
            return
        path = rng.choice(paths)
        try:
            with open(path, "r+b") as f:
                size = os.fstat(f.fileno()).st_size
                if size == 0:
                    continue
                with mmap.mmap(f.fileno(), size) as m:
                    hot = min(size, 128 * 1024)
                    offset = rng.randrange(hot) if rng.random() < 0.5 else rng.randrange(size)
                    m[offset] = rng.randrange(256)
                    flips += 1
        except (FileNotFoundError, ValueError, OSError):
            pass  # the object went away (the programs ended): fine


# x86_64 system calls a perftest server sits in while it waits on its TCP peer.
SOCKET_WAITS = {0: "read", 7: "poll", 23: "select", 43: "accept", 45: "recvfrom", 270: "pselect6", 271: "ppoll",
                288: "accept4"}


def waiting_on_socket(p):
    """The main thread of `p` is blocked in a socket wait (its peer is gone or never came), not in a verb."""
    try:
        nr = int(open(f"/proc/{p.pid}/task/{p.pid}/syscall").read().split()[0])
        return SOCKET_WAITS.get(nr)
    except (OSError, ValueError, IndexError):
        return None


def kill_group(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


PAIRS = [["ib_write_bw", "-n", "3000", "-s", "65536"], ["ib_write_bw", "-n", "20000", "-s", "64"],
         ["ib_read_bw", "-n", "2000", "-s", "65536"], ["ib_read_bw", "-n", "20000", "-s", "8"]]
port = args.port
while time.time() - start < args.seconds or runs == 0:
    prog = rng.choice(PAIRS)
    runs += 1
    name = f"{args.fabric}-{runs}"
    env = dict(os.environ, SIMVERBS_FABRIC=name)
    base = [args.cli, "run", "--", "stdbuf", "-oL"] + prog + ["-p", str(port)]
    port += 1
    server = subprocess.Popen(base, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                              start_new_session=True)
    while "Waiting for client" not in (server.stdout.readline() or "Waiting for client (eof)"):
        pass
    client = subprocess.Popen(base + ["127.0.0.1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=env, start_new_session=True)
    # Garbage while the traffic runs: a byte every millisecond or so, a burst now and then.
    deadline = time.time() + args.watchdog
    while time.time() < deadline and client.poll() is None:
        flip_some(name, rng.choice([1, 1, 1, 8, 64]))
        time.sleep(0.001)
    # The server ends once the client has (perftest tells it over TCP), or
    # waits in a socket call for a client that failed before it connected.
    grace = time.time() + 10
    while time.time() < grace and server.poll() is None and not (client.poll() is not None and
                                                                 waiting_on_socket(server)):
        time.sleep(0.01)
    hung = [n for n, p in (("client", client), ("server", server)) if p.poll() is None and
            not (n == "server" and waiting_on_socket(p))]
    # What still runs now is killed here: its signal is ours, not a crash (a
    # server may still sit in its socket call for a client that just failed).
    ended = {n for n, p in (("client", client), ("server", server)) if p.poll() is not None}
    for p in (client, server):
        kill_group(p)
    outs = [p.communicate()[0] for p in (client, server)]
    what = f"run {runs} ({' '.join(prog)})"
    if hung:
        failures.append(f"{what}: {' and '.join(hung)} still running after {args.watchdog:.0f} s: "
                        f"{outs[0][-300:]!r}")
    for n, p, out in (("client", client, outs[0]), ("server", server, outs[1])):
        if n in ended and p.returncode < 0:
            failures.append(f"{what}: the {n} died of signal {-p.returncode}: {out[-300:]!r}")
    errored += any(p.returncode not in (0, None) for p in (client, server))
    # Its programs have exited: clean removes the fabric whatever our garbage
    # made of it (remove what it leaves, so the next runs are judged alone).
    cleaned = subprocess.run([args.cli, "clean"], capture_output=True, text=True, timeout=60)
    if left := objects(name):
        failures.append(f"{what}: simverbs clean left {left}: {cleaned.stdout[-300:]!r} {cleaned.stderr[-300:]!r}")
        for path in left:
            try:
                os.unlink(path)
            except OSError:
                pass
    if failures:
        break

elapsed = time.time() - start
print(f"fabric-fuzz: {runs} runs, {flips} bytes written ({flips / elapsed:.0f}/s), {errored} runs ended with an "
      f"error status, in {elapsed:.1f} s")
for f in failures:
    print("FAIL", f)
if failures:
    print(f"FAIL replay with --seed {seed}")
print(f"{0 if failures else 1} passed, {1 if failures else 0} failed")
sys.exit(1 if failures else 0)
