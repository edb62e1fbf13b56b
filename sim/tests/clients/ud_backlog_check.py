#!/usr/bin/env python3
"""Links are lossless: a UD or UC stream to a live receiver that is slower
than its sender loses nothing at the link (ib_send_bw -c UD/UC -s 64 -n 200000:
port_xmit_discards stays 0; UD lost tens of thousands when a full ring dropped
datagrams, and UC lost its packets beyond the sender's backlog bound when the
receiver fell behind), nor does a UD stream to a multicast group (ib_send_bw
-c UD -g: 190000 of 200000 copies were lost at the member's full ring, and the
server waited for them for ever). Nor does an RC stream with more packets in flight than
that bound (qperf rc_rdma_write_bw: 1024 WRITEs with immediate of 64 KiB in
2 KiB packets, through the rings): its requester waits for the link instead of
having packets dropped and sending a window again for each (it lost about
20000 packets a second, at a third of the rate). Whether the
receiver had a receive posted for each is not asked: a message that finds none
is lost, as on InfiniBand, and perftest's server then waits for it, so it is
stopped once its client has ended.

A UD sender to a peer that stops taking packets does not grow without bound:
its send queue waits while the peer's packet ring is full (links are
lossless), and once the peer has kept it full for a switch's head-of-queue
lifetime (268 ms), datagrams to it are discarded; reliable backlogs are
bounded too.

ib_send_bw over UD streams to a server that is then stopped (SIGSTOP); the
client's resident memory may not grow by more than 32 MiB in the next 2 s
(it grew by about 50 MiB a second when such datagrams were kept). The drops
are counted: port_xmit_discards of the sending port grows meanwhile, as
`simverbs counters` shows and as a program on the fabric reads it through
ibv_read_sysfs_file.

usage: ud_backlog_check.py SIMVERBS_CLI FABRIC PORT
"""
import os
import re
import select
import signal
import subprocess
import sys
import time

from tcp_listening import wait_listening

cli, fabric, port = sys.argv[1], sys.argv[2], sys.argv[3]
env = dict(os.environ, SIMVERBS_FABRIC=fabric)
run = [cli, "run", "--", "stdbuf", "-oL", "ib_send_bw", "-c", "UD", "-p", port, "-n", "100000000", "-s", "2048"]
failures = []


def cpu_ticks(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def read_xmit_discards(fabric_env):
    """sim0 port 1's port_xmit_discards on the fabric of `fabric_env`, by `simverbs counters`; None with
    what it printed when it printed none (no process is on that fabric)."""
    out = subprocess.run([cli, "counters"], capture_output=True, text=True, env=fabric_env, timeout=60)
    for line in out.stdout.splitlines():
        if line.startswith("sim0 port 1 port_xmit_discards "):
            return int(line.split()[-1]), ""
    return None, f"{out.stdout!r} {out.stderr!r}"


def xmit_discards():
    """sim0 port 1's port_xmit_discards on the stopped peer's fabric."""
    discards, printed = read_xmit_discards(env)
    if discards is None:
        failures.append(f"simverbs counters printed no sim0 port 1 port_xmit_discards: {printed}")
    return discards or 0


# Opens sim0 (so that it is on the fabric) and prints what ibv_read_sysfs_file reads of the counter.
READ_SYSFS = """
import ctypes
v = ctypes.CDLL("libibverbs.so.1")
v.ibv_get_device_list.restype = ctypes.POINTER(ctypes.c_void_p)
v.ibv_open_device.restype = ctypes.c_void_p
v.ibv_open_device.argtypes = [ctypes.c_void_p]
devices = v.ibv_get_device_list(None)
assert v.ibv_open_device(devices[0]), "ibv_open_device failed"
buf = ctypes.create_string_buffer(64)
n = v.ibv_read_sysfs_file(b"/sys/class/infiniband/sim0", b"ports/1/counters/port_xmit_discards", buf, 64)
print(n, buf.value.decode().strip())
"""


def start_holder(live_env, run):
    """ibv_asyncwatch on the fabric of `live_env`, started by `run`, which keeps the fabric (and its counters)
    after a pair has ended; returns once it has joined."""
    holder = subprocess.Popen(run + ["ibv_asyncwatch", "-d", "sim0"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env=live_env)
    deadline = time.time() + 20
    while time.time() < deadline and read_xmit_discards(live_env)[0] is None:
        time.sleep(0.05)  # until ibv_asyncwatch has joined the fabric
    return holder


def live_stream_discards(transport, live_port, options=(), profile="sim-ib"):
    """port_xmit_discards of sim0 port 1 after a `transport` stream (with perftest `options`) to a live server,
    on a fabric of its own that ibv_asyncwatch keeps (with its counters) after the pair has ended; None when it
    could not be read."""
    live_env = dict(os.environ, SIMVERBS_FABRIC=f"{fabric}-live-{transport}{''.join(options)}")
    run_profile = [cli, "run", "--profile", profile, "--"]
    procs = [start_holder(live_env, run_profile)]
    try:
        stream = run_profile + ["ib_send_bw", "-c", transport, *options, "-s", "64", "-n", "200000", "-p", live_port]
        server = subprocess.Popen(stream, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=live_env)
        procs.append(server)
        if not wait_listening(int(live_port), server, time.time() + 20):
            failures.append(f"the live {transport} server never listened: "
                            f"{server.communicate(timeout=20)[0][-300:]!r}")
            return None
        client = subprocess.Popen(["stdbuf", "-oL"] + stream + ["127.0.0.1"], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, env=live_env)
        procs.append(client)
        # Its result line says every send has completed (it then waits for the server, which may wait for
        # a datagram its receive queue had no room for). Read unbuffered: nothing may sit unread in a buffer.
        out = ""
        deadline = time.time() + 120
        while time.time() < deadline and not re.search(r"^\s*64\s+200000\s", out, re.M):
            ready, _, _ = select.select([client.stdout], [], [], max(0.0, deadline - time.time()))
            chunk = os.read(client.stdout.fileno(), 65536) if ready else b""
            if not chunk and (ready or client.poll() is not None):
                break  # end of its output
            out += chunk.decode(errors="replace")
        if not re.search(r"^\s*64\s+200000\s", out, re.M):
            failures.append(f"the {transport} stream to a live server did not complete: {out[-300:]!r}")
            return None
        discards, printed = read_xmit_discards(live_env)
        if discards is None:
            failures.append(f"simverbs counters printed no sim0 port 1 port_xmit_discards for the live {transport} "
                            f"stream: {printed}")
        return discards
    finally:
        for p in procs:
            p.kill()
            p.communicate()


def rc_stream_discards(live_port):
    """port_xmit_discards of sim0 port 1 after 2 s of qperf rc_rdma_write_bw to a live server, on a fabric of
    its own kept (with its counters) by ibv_asyncwatch; None when it could not be read."""
    live_env = dict(os.environ, SIMVERBS_FABRIC=f"{fabric}-live-rc")
    procs = [start_holder(live_env, [cli, "run", "--"])]
    try:
        server = subprocess.Popen([cli, "run", "--", "qperf", "-lp", live_port], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, env=live_env)
        procs.append(server)
        if not wait_listening(int(live_port), server, time.time() + 20):
            failures.append(f"the qperf server never listened: {server.communicate(timeout=20)[0][-300:]!r}")
            return None
        client = subprocess.run([cli, "run", "--", "qperf", "127.0.0.1", "-lp", live_port, "-t", "2", "-m", "64K",
                                 "rc_rdma_write_bw"], capture_output=True, text=True, env=live_env, timeout=120)
        if client.returncode != 0 or not re.search(r"bw\s*=\s*[0-9.]+ [GM]B/sec", client.stdout):
            failures.append(f"qperf rc_rdma_write_bw did not complete: {client.stdout[-300:]!r} "
                            f"{client.stderr[-300:]!r}")
            return None
        print(f"qperf rc_rdma_write_bw: {' '.join(client.stdout.split())}")
        discards, printed = read_xmit_discards(live_env)
        if discards is None:
            failures.append(f"simverbs counters printed no sim0 port 1 port_xmit_discards for the RC stream: {printed}")
        return discards
    finally:
        for p in procs:
            p.kill()
            p.communicate()


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


# (perftest's -g: UD to a multicast group the server's QP joined, on RoCE, where perftest needs no SA.)
for n, (transport, options, profile) in enumerate((("UD", (), "sim-ib"), ("UC", (), "sim-ib"),
                                                   ("UD", ("-g", "-x", "1"), "sim-roce"))):
    name = f"{transport} {' '.join(options)}".strip()
    discards = live_stream_discards(transport, str(int(port) + (1 + n if n < 2 else 4)), options, profile)
    if discards:
        failures.append(f"a {name} stream to a live server lost {discards} packets at the link "
                        "(port_xmit_discards)")
    print(f"{name} stream to a live server: sim0 port 1 port_xmit_discards {discards}")

discards = rc_stream_discards(str(int(port) + 3))
if discards:
    failures.append(f"an RC stream to a live server lost {discards} packets at the link (port_xmit_discards)")
print(f"RC stream to a live server: sim0 port 1 port_xmit_discards {discards}")

server = subprocess.Popen(run, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
client = None
try:
    while "Waiting for client" not in (server.stdout.readline() or "Waiting for client (eof)"):
        pass
    client = subprocess.Popen(run + ["127.0.0.1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
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
        time.sleep(0.5)  # let the server's ring fill up and its lifetime pass: what is measured is what comes after
        before, ticks, discards_before = rss_kib(client.pid), cpu_ticks(client.pid), xmit_discards()
        time.sleep(2)
        after, busy, discards_after = rss_kib(client.pid), cpu_ticks(client.pid) - ticks, xmit_discards()
        read = subprocess.run([cli, "run", "--", sys.executable, "-c", READ_SYSFS], capture_output=True, text=True,
                              env=env, timeout=60)
        fields = read.stdout.split()
        if read.returncode != 0 or len(fields) != 2 or int(fields[0]) <= 0 or int(fields[1]) < discards_after:
            failures.append(f"ibv_read_sysfs_file of port_xmit_discards: {read.stdout!r} {read.stderr[-300:]!r}, "
                            f"expected at least {discards_after}")
        if client.poll() is not None:
            failures.append(f"the client ended while its peer was stopped: {client.communicate()[0][-300:]!r}")
        elif busy < 20:
            failures.append(f"the client used {busy} ticks of CPU in 2 s: it is not streaming, this proves nothing")
        elif after - before > 32 * 1024:
            failures.append(f"the client grew from {before} KiB to {after} KiB in 2 s while its peer was stopped")
        elif discards_after <= discards_before:
            failures.append(f"port_xmit_discards went from {discards_before} to {discards_after} while datagrams "
                            "to the stopped peer were dropped")
        print(f"client resident memory while the server is stopped: {before} KiB, 2 s later {after} KiB")
        print(f"sim0 port 1 port_xmit_discards: {discards_before}, 2 s later {discards_after}")
finally:
    server.send_signal(signal.SIGCONT)
    for p in (client, server):
        if p:
            p.kill()
            p.wait()
    subprocess.run([cli, "clean"], capture_output=True, timeout=60)

for f in failures:
    print("FAIL", f)
print(f"{5 - min(len(failures), 5)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
