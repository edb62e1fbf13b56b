#!/usr/bin/env python3
"""Runs unmodified Debian client/server programs (ibverbs-utils pingpongs,
perftest) as two processes (ibv_xsrq_pingpong -c 2: three) on the simulator
and checks that all succeed.

usage: pair_check.py SIMVERBS_CLI PROFILE FABRIC BASE_PORT [--only TEXT]

--only TEXT runs the cases whose command line contains TEXT.

Each pair runs on the profile's first device with its own TCP port. A failure
prints both outputs, which name the verb and errno that failed. A program that
prints a verdict line (ibv_xsrq_pingpong: "success") must print it on every
side as well as exit 0.
"""
import os
import subprocess
import sys
import time

from tcp_listening import wait_listening

cli, profile, fabric, base_port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
only = sys.argv[6] if len(sys.argv) > 6 and sys.argv[5] == "--only" else ""
roce = "roce" in profile
# RoCE needs a GRH: the pingpongs take the GID index, perftest picks one itself.
gid = ["-g", "1"] if roce else []

PINGPONGS = ["ibv_rc_pingpong", "ibv_uc_pingpong", "ibv_ud_pingpong", "ibv_srq_pingpong"]
PERFTESTS = ["ib_send_lat", "ib_send_bw", "ib_write_lat", "ib_write_bw", "ib_read_lat", "ib_read_bw",
             "ib_atomic_lat", "ib_atomic_bw"]

cases = []
for prog in PINGPONGS:
    for events in (False, True):
        cases.append((prog, ["-c", "-n", "200"] + gid + (["-e"] if events else [])))
# Completion timestamps (-t): the pingpong reads its CQ with ibv_start_poll and reposts receives before
# ibv_end_poll; with a receive queue of 2 each repost needs the slot of the completion just read.
cases.append(("ibv_rc_pingpong", ["-c", "-n", "200", "-t", "-r", "2"] + gid))
# ibv_xsrq_pingpong has no data check; it prints "success" once everything is
# received and torn down. Its -c is the number of clients the server takes
# (a client ignores it): with two, the server reaches each client's XRC SRQ
# through the other client's target QP as well, across processes.
for events in (False, True):
    cases.append(("ibv_xsrq_pingpong", ["-n", "200"] + gid + (["-e"] if events else [])))
cases.append(("ibv_xsrq_pingpong", ["-n", "200", "-c", "2"] + gid))
VERDICT = {"ibv_xsrq_pingpong": "success"}


def client_count(prog, args):
    return int(args[args.index("-c") + 1]) if prog == "ibv_xsrq_pingpong" and "-c" in args else 1
for prog in PERFTESTS:
    for events in (False, True):
        if events and "write" in prog:
            continue  # perftest refuses -e for WRITE ("Events feature not available on WRITE verb")
        cases.append((prog, ["-n", "200"] + (["-e"] if events else [])))
# 1 MiB READs, as many outstanding as the device takes: their answers wait for room in the
# requester's packet ring, and none may count as lost.
cases.append(("ib_read_bw", ["-n", "200", "-s", "1048576"]))
cases.append(("ib_read_lat", ["-n", "100", "-s", "1048576"]))
cases = [(prog, args) for prog, args in cases if only in f"{prog} {' '.join(args)}"]
if not cases:
    sys.exit(f"pair_check.py: no case matches --only {only!r}")


env = dict(os.environ, SIMVERBS_FABRIC=fabric)
failures = []
for i, (prog, args) in enumerate(cases):
    port = base_port + i
    name = f"{prog} {' '.join(args)}"
    run = [cli, "run", "--profile", profile, "--", prog, "-p", str(port)] + args
    server = subprocess.Popen(run, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if not wait_listening(port, server, time.time() + 20):
        failures.append((name, "the server never listened", server.communicate(timeout=20)[0], ""))
        continue
    clients = [subprocess.Popen(run + ["127.0.0.1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=env) for _ in range(client_count(prog, args))]
    try:
        deadline = time.time() + 60
        client_outs = [c.communicate(timeout=max(1, deadline - time.time()))[0] for c in clients]
        client_out = "\n".join(client_outs)
        server_out = server.communicate(timeout=max(1, deadline - time.time()))[0]
    except subprocess.TimeoutExpired:
        for p in clients + [server]:
            p.kill()
        client_out = "\n".join(c.communicate()[0] for c in clients)
        failures.append((name, "timed out (60 s)", server.communicate()[0], client_out))
        continue
    verdict = VERDICT.get(prog)
    client_rcs = [c.returncode for c in clients]
    if any(client_rcs) or server.returncode != 0:
        failures.append((name, f"client exit {client_rcs}, server exit {server.returncode}", server_out,
                         client_out))
    elif verdict and not (verdict in server_out.splitlines() and
                          all(verdict in out.splitlines() for out in client_outs)):
        failures.append((name, f"exit 0 without the line \"{verdict}\" on every side", server_out, client_out))
    else:
        print(f"ok   {name}")

for name, why, server_out, client_out in failures:
    print(f"FAIL {name}: {why}\n--- server:\n{server_out}\n--- client:\n{client_out}")
print(f"{len(cases) - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
