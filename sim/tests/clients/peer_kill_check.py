#!/usr/bin/env python3
"""A peer killed with SIGKILL mid-stream: the survivor's outstanding work
requests fail with "transport retry counter exceeded" instead of hanging,
the survivor exits, and no shared-memory segment of the fabric is left.

usage: peer_kill_check.py SIMVERBS_CLI FABRIC PORT
"""
import glob
import os
import signal
import subprocess
import sys
import time

cli, fabric, port = sys.argv[1], sys.argv[2], sys.argv[3]
env = dict(os.environ, SIMVERBS_FABRIC=fabric)
segments = lambda: sorted(p for p in glob.glob(f"/dev/shm/simverbs-{os.getuid()}-{fabric}*"))
failures = []

before = segments()
# ib_write_bw's client always has WRITEs outstanding, so it must notice the
# loss (a pingpong waiting for a receive would wait forever, on hardware too).
run = [cli, "run", "--", "ib_write_bw", "-p", port, "-n", "100000000"]
server = subprocess.Popen(run, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
time.sleep(0.5)  # the server only has to be listening; the client retries nothing
# Line-buffered, so the header can be seen while the test runs.
client = subprocess.Popen(run[:3] + ["stdbuf", "-oL"] + run[3:] + ["127.0.0.1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
# perftest prints its table header once the connection is up and the WRITEs
# start; kill the server then, mid-stream.
seen = ""
deadline = time.time() + 20
while time.time() < deadline and "#bytes" not in seen and client.poll() is None:
    line = client.stdout.readline()
    if not line:
        break
    seen += line
time.sleep(0.2)
server.send_signal(signal.SIGKILL)
server.wait()
try:
    out, _ = client.communicate(timeout=30)
    out = seen + out
except subprocess.TimeoutExpired:
    client.kill()
    out = client.communicate()[0]
    failures.append("the survivor hung after its peer was killed (30 s)")
# perftest prints the status number: 12 is IBV_WC_RETRY_EXC_ERR.
if "Failed status 12:" not in out and "transport retry counter exceeded" not in out:
    failures.append(f"the survivor did not report IBV_WC_RETRY_EXC_ERR: {out[-500:]!r}")
if client.returncode == 0:
    failures.append("the survivor exited 0")
after = segments()
if after != before:
    failures.append(f"shared memory left behind: before {before}, after {after}")

for f in failures:
    print("FAIL", f)
print(f"{4 - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
