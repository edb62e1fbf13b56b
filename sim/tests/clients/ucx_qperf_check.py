#!/usr/bin/env python3
"""Two more widely used verbs clients, unmodified, on the simulator: qperf (its RC, UC, UD, RDMA and
atomic tests) and UCX's ucx_perftest over the rc_verbs and ud_verbs transports.

usage: ucx_qperf_check.py SIMVERBS_CLI FABRIC BASE_PORT

UCX uses a device only when /dev/infiniband/<its uverbs node> is a character device it may open, so it
runs under `simverbs run --sysfs`, which provides those nodes; where the machine gives no mount namespace
(no root, no unprivileged user namespaces) the UCX cases are skipped and say so. Every pair has its own
TCP port and a deadline; a failure prints both outputs.
"""
import os
import subprocess
import sys
import time

from tcp_listening import wait_listening

cli, fabric, base_port = sys.argv[1], sys.argv[2], int(sys.argv[3])
env = dict(os.environ, SIMVERBS_FABRIC=fabric)
failures = []
passed = 0


def pair(name, server_cmd, client_cmd, port, extra_env=None, expect=None):
    """Runs server and client; both must exit 0, and the client's output must contain `expect`."""
    global passed
    e = dict(env, **(extra_env or {}))
    server = subprocess.Popen(server_cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=e)
    if not wait_listening(port, server, time.time() + 20):
        server.kill()
        failures.append((name, "the server never listened", server.communicate()[0], ""))
        return
    client = subprocess.Popen(client_cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=e)
    try:
        deadline = time.time() + 60
        client_out = client.communicate(timeout=max(1, deadline - time.time()))[0]
        server_out = server.communicate(timeout=max(1, deadline - time.time()))[0]
    except subprocess.TimeoutExpired:
        for p in (client, server):
            p.kill()
        failures.append((name, "timed out (60 s)", server.communicate()[0], client.communicate()[0]))
        return
    if client.returncode != 0 or server.returncode != 0:
        failures.append((name, f"client exit {client.returncode}, server exit {server.returncode}", server_out,
                         client_out))
    elif expect and expect not in client_out:
        failures.append((name, f"no {expect!r} in the client's output", server_out, client_out))
    else:
        passed += 1
        print(f"ok   {name}")


# qperf: a server that serves one client after another, and a client that runs its tests in order.
port = base_port
qperf_tests = ["rc_lat", "uc_lat", "ud_lat", "rc_bw", "rc_rdma_read_lat", "rc_rdma_write_lat",
               "ver_rc_compare_swap", "ver_rc_fetch_add"]
for test in qperf_tests:
    for poll in (False, True):
        name = f"qperf {test}" + (" -cp 1" if poll else "")
        options = ["-t", "1"] + (["-cp", "1"] if poll else [])
        server = [cli, "run", "--", "qperf", "-lp", str(port)]
        client = [cli, "run", "--", "qperf", "127.0.0.1", "-lp", str(port)] + options + [test]
        # One server per pair: it runs on until killed, so the pair ends with the client.
        e = dict(env)
        srv = subprocess.Popen(server, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=e)
        if not wait_listening(port, srv, time.time() + 20):
            srv.kill()
            failures.append((name, "the server never listened", srv.communicate()[0], ""))
        else:
            r = subprocess.run(client, capture_output=True, text=True, env=e, timeout=60)
            srv.kill()
            srv_out = srv.communicate()[0]
            if r.returncode != 0 or ("failed" in r.stdout + r.stderr) or not any(
                    word in r.stdout for word in ("latency", "bw", "msg_rate")):
                failures.append((name, f"client exit {r.returncode}", srv_out, r.stdout + r.stderr))
            else:
                passed += 1
                print(f"ok   {name}")
        port += 1

# UCX, when a mount namespace can be had for `simverbs run --sysfs`.
namespace = subprocess.run([cli, "run", "--sysfs", "--", "true"], capture_output=True, text=True, env=env, timeout=60)
nodes = subprocess.run([cli, "run", "--sysfs", "--", "test", "-c", "/dev/infiniband/uverbs0"], capture_output=True,
                       text=True, env=env, timeout=60)
if namespace.returncode != 0:
    print(f"skip UCX: no mount namespace for simverbs run --sysfs here: {namespace.stderr.strip()}")
elif nodes.returncode != 0:
    failures.append(("simverbs run --sysfs", "no character device /dev/infiniband/uverbs0 (UCX needs it)",
                     "", nodes.stdout + nodes.stderr))
else:
    ucx_env = {"UCX_TLS": "rc_verbs,ud_verbs", "UCX_NET_DEVICES": "sim0:1", "UCX_WARN_UNUSED_ENV_VARS": "n"}
    for test, size, iters in (("tag_lat", "8", "1000"), ("tag_bw", "1048576", "100"), ("ucp_put_bw", "65536", "200"),
                              ("ucp_get", "4096", "50"), ("ucp_fadd", "8", "200"), ("ucp_am_lat", "8", "1000")):
        name = f"ucx_perftest -t {test} -s {size}"
        base = [cli, "run", "--sysfs", "--", "ucx_perftest", "-p", str(port), "-t", test, "-s", size, "-n", iters]
        pair(name, base, base[:5] + ["127.0.0.1"] + base[5:], port, ucx_env, expect="Final:")
        port += 1

for name, why, server_out, client_out in failures:
    print(f"FAIL {name}: {why}\n--- server:\n{server_out[-3000:]}\n--- client:\n{client_out[-3000:]}")
print(f"{passed} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
