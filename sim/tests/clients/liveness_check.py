#!/usr/bin/env python3
"""Whether a peer process is alive is judged without pids.

1. A peer killed with SIGKILL and never reaped (a zombie: kill(pid, 0) still
   succeeds) is dead: the survivor's outstanding work requests fail with
   IBV_WC_RETRY_EXC_ERR, and once the survivor exits nothing of the fabric is
   left in /dev/shm, while the zombie is still unreaped.
2. A live peer in another PID namespace (sharing /dev/shm) is alive: a
   pingpong between it and a process of this namespace succeeds (its pid means
   another process here). Needs root for the namespace; skipped otherwise.

usage: liveness_check.py SIMVERBS_CLI FABRIC PORT
"""
import glob
import os
import signal
import subprocess
import sys
import time

cli, fabric, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
failures = []
checks = 0


def segments(name):
    return sorted(glob.glob(f"/dev/shm/simverbs-{os.geteuid()}-{name}*"))


def wait_for(pred, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return False


# 1. A zombie peer.
name = fabric + "-zombie"
env = dict(os.environ, SIMVERBS_FABRIC=name)
run = [cli, "run", "--", "ib_write_bw", "-p", str(port), "-n", "100000000"]
server = subprocess.Popen(run[:3] + ["stdbuf", "-oL"] + run[3:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, env=env)
# perftest's client does not retry its connection: start it once the server listens.
while "Waiting for client" not in (server.stdout.readline() or "Waiting for client (eof)"):
    pass
client = subprocess.Popen(run[:3] + ["stdbuf", "-oL"] + run[3:] + ["127.0.0.1"], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, env=env)
seen = ""
deadline = time.time() + 20
while time.time() < deadline and "#bytes" not in seen:
    line = client.stdout.readline()
    if not line:
        break
    seen += line
os.kill(server.pid, signal.SIGKILL)
# Not reaped: the server stays a zombie until the end of this case.
wait_for(lambda: open(f"/proc/{server.pid}/stat").read().split(") ")[1].startswith("Z"), 5)
try:
    out = seen + client.communicate(timeout=30)[0]
except subprocess.TimeoutExpired:
    client.kill()
    out = seen + client.communicate()[0]
    failures.append("zombie: the survivor hung after its peer was killed (30 s)")
checks += 3
if "Failed status 12:" not in out and "transport retry counter exceeded" not in out:
    failures.append(f"zombie: the survivor did not report IBV_WC_RETRY_EXC_ERR: {out[-400:]!r}")
state = open(f"/proc/{server.pid}/stat").read().split(") ")[1][0]
if state != "Z":
    failures.append(f"zombie: the killed server is in state {state}, not a zombie: the case proves nothing")
if segments(name):
    failures.append(f"zombie: shared memory left while the dead peer is an unreaped zombie: {segments(name)}")
server.wait()

# 2. A live peer in another PID namespace.
if os.geteuid() != 0:
    print("SKIP pid namespace case: needs root for unshare --pid")
else:
    checks += 1
    name = fabric + "-pidns"
    env = dict(os.environ, SIMVERBS_FABRIC=name)
    pp = ["ibv_rc_pingpong", "-p", str(port + 1), "-n", "2000", "-c"]
    # The server is pid 1 in its namespace, with a /proc of its own: here, pid 1 is another process.
    server = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", cli, "run", "--"] + pp, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
    wait_for(lambda: len(segments(name)) >= 2, 10)
    try:
        client = subprocess.run([cli, "run", "--"] + pp + ["127.0.0.1"], capture_output=True, text=True, env=env,
                                timeout=60)
    except subprocess.TimeoutExpired as e:
        client = subprocess.CompletedProcess(e.cmd, -9, e.stdout or "", "(killed after 60 s)")
    try:
        server_out = server.communicate(timeout=30)[0]
    except subprocess.TimeoutExpired:
        # unshare's child is the namespace's init: end the whole session.
        os.killpg(server.pid, signal.SIGKILL)
        server_out = server.communicate()[0]
    if client.returncode != 0 or server.returncode != 0:
        failures.append(f"pid namespace: the pingpong failed (client {client.returncode}, server "
                        f"{server.returncode}): {client.stdout[-300:]!r} {client.stderr[-300:]!r} {server_out[-300:]!r}")

for f in failures:
    print("FAIL", f)
print(f"{checks - min(len(failures), checks)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
