#!/usr/bin/env python3
"""A UD sender to a peer that stops taking packets does not grow without bound:
a datagram that finds the peer's packet ring full is dropped, as a congested
fabric drops it, and reliable backlogs are bounded too.

ib_send_bw over UD streams to a server that is then stopped (SIGSTOP); the
client's resident memory may not grow by more than 32 MiB in the next 2 s
(it grew by about 50 MiB a second when such datagrams were kept).

usage: ud_backlog_check.py SIMVERBS_CLI FABRIC PORT
"""
import os
import signal
import subprocess
import sys
import time

cli, fabric, port = sys.argv[1], sys.argv[2], sys.argv[3]
env = dict(os.environ, SIMVERBS_FABRIC=fabric)
run = [cli, "run", "--", "stdbuf", "-oL", "ib_send_bw", "-c", "UD", "-p", port, "-n", "100000000", "-s", "2048"]
failures = []


def cpu_ticks(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


server = subprocess.Popen(run, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
client = None
try:
    while "Waiting for client" not in (server.stdout.readline() or "Waiting for client (eof)"):
        pass
    client = subprocess.Popen(run + ["localhost"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=env)
    seen = ""
    deadline = time.time() + 20
    while time.time() < deadline and "#bytes" not in seen and client.poll() is None:
        seen += client.stdout.readline()
    if "#bytes" not in seen:
        failures.append(f"the UD stream did not start: {seen[-300:]!r}")
    else:
        # Stop the server once the client is past perftest's TCP handshake and streaming (using CPU).
        start = cpu_ticks(client.pid)
        deadline = time.time() + 10
        while time.time() < deadline and cpu_ticks(client.pid) - start < 10:
            time.sleep(0.05)
        server.send_signal(signal.SIGSTOP)
        time.sleep(0.5)  # let the server's ring fill up: what is measured is what comes after
        before, ticks = rss_kib(client.pid), cpu_ticks(client.pid)
        time.sleep(2)
        after, busy = rss_kib(client.pid), cpu_ticks(client.pid) - ticks
        if client.poll() is not None:
            failures.append(f"the client ended while its peer was stopped: {client.communicate()[0][-300:]!r}")
        elif busy < 20:
            failures.append(f"the client used {busy} ticks of CPU in 2 s: it is not streaming, this proves nothing")
        elif after - before > 32 * 1024:
            failures.append(f"the client grew from {before} KiB to {after} KiB in 2 s while its peer was stopped")
        print(f"client resident memory while the server is stopped: {before} KiB, 2 s later {after} KiB")
finally:
    server.send_signal(signal.SIGCONT)
    for p in (client, server):
        if p:
            p.kill()
            p.wait()
    subprocess.run([cli, "clean"], capture_output=True, timeout=60)

for f in failures:
    print("FAIL", f)
print(f"{1 - min(len(failures), 1)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
