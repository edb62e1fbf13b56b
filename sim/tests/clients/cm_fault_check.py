#!/usr/bin/env python3
"""`simverbs inject` reaches the connection manager of unmodified rdma_cm programs (rping, rdmacm-utils).

With an rping server listening on the first port's address (127.0.0.1):
  CM_REJECT --reason 28   the next client's request is rejected by the CM: the client prints
                          "cma event RDMA_CM_EVENT_REJECTED, error 28" and fails;
  CM_DROP --message REQ   the client's REQs are lost on their way into the server on every try: the client
                          gets UNREACHABLE, -110; with --count 3 it connects, late;
  CM_DROP --message REP   the server's REP is lost on every try: the client gets UNREACHABLE, -110;
  ADDR_CHANGE             a new server, bound to the port, prints the event it does not handle;
  DEVICE_FATAL            that server gets DEVICE_REMOVAL ("cma detected device removal") and ends;
and the CLI's errors for CM faults say how to fix them.

usage: cm_fault_check.py SIMVERBS_CLI FABRIC BASE_PORT
"""
import os
import queue
import subprocess
import sys
import threading
import time

from check_tally import Tally
from cm_listening import listening

cli, fabric, base_port = sys.argv[1], sys.argv[2], int(sys.argv[3])
env = dict(os.environ, SIMVERBS_FABRIC=fabric)
tally = Tally()
expect = tally.expect
WAIT = 20  # seconds for any one program or line: a program that says nothing fails the check, never hangs it


def inject(*args):
    return subprocess.run([cli, "inject", *args], capture_output=True, text=True, env=env, timeout=60)


def run(*argv):
    return subprocess.run([cli, "run", "--", *argv], capture_output=True, text=True, env=env, timeout=60)


class Server:
    """An rping server under `simverbs run`, its output read line by line with a timeout."""

    def __init__(self, port):
        self.port = port
        self.proc = subprocess.Popen([cli, "run", "--", "rping", "-s", "-a", "127.0.0.1", "-p", str(port), "-v",
                                      "-C", "1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env=env)
        self.lines = queue.Queue()
        self.seen = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_listening(self):
        deadline = time.time() + WAIT
        while time.time() < deadline and self.proc.poll() is None and not listening(self.port, fabric):
            time.sleep(0.02)  # polls a condition (the socket shows up), bounded by the deadline
        return listening(self.port, fabric)

    def wait_line(self, text):
        """True once a line containing text comes; False at the end of the output or after WAIT s."""
        deadline = time.time() + WAIT
        while time.time() < deadline:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.time()))
            except queue.Empty:
                return False
            if line is None:
                return False
            self.seen.append(line)
            if text in line:
                return True
        return False

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=WAIT)


def expect_client_fails(what, port, text):
    """An rping client to port must fail and print text."""
    c = run("rping", "-c", "-a", "127.0.0.1", "-p", str(port), "-v", "-C", "1")
    out = c.stdout + c.stderr
    expect(what, c.returncode != 0 and text in out, f"exit {c.returncode}: {out!r}")


# ---- errors of the CLI
r = inject("CM_DROP", "--message", "RTU")
expect("CM_DROP of a message the CM does not resend: exit 2 and the list",
       r.returncode == 2 and "REQ, REP, DREQ, SIDR_REQ" in r.stderr, f"exit {r.returncode}: {r.stderr!r}")

servers = []
try:
    # ---- CM_REJECT and CM_DROP, armed in the server
    server = Server(base_port)
    servers.append(server)
    if expect("rping -s listens", server.wait_listening(), "its CM socket never showed in /proc/net/unix"):
        r = inject("CM_REJECT", "--reason", "0")
        expect("CM_REJECT --reason 0: exit 2 and the range", r.returncode == 2 and "1..255" in r.stderr,
               f"exit {r.returncode}: {r.stderr!r}")
        r = inject("CM_REJECT", "--reason", "28")
        expect("CM_REJECT is armed in the server", r.returncode == 0 and "armed in 1 process" in r.stdout,
               f"exit {r.returncode}: {r.stdout!r} {r.stderr!r}")
        expect_client_fails("the rejected client says REJECTED, reason 28, and fails", base_port,
                            "cma event RDMA_CM_EVENT_REJECTED, error 28")

        # REQs lost on their way into the server: the client, started afterwards, resends them.
        r = inject("CM_DROP", "--message", "REQ")
        expect("CM_DROP REQ is armed in the server", r.returncode == 0 and "lose the next 16 REQ" in r.stdout,
               f"exit {r.returncode}: {r.stdout!r} {r.stderr!r}")
        expect_client_fails("with every REQ lost the client gets UNREACHABLE (-ETIMEDOUT) and fails", base_port,
                            "cma event RDMA_CM_EVENT_UNREACHABLE, error -110")
        r = inject("CM_DROP", "--message", "REQ", "--count", "3")
        expect("CM_DROP REQ --count 3 is armed in the server", r.returncode == 0 and "lose the next 3 REQ" in r.stdout,
               f"exit {r.returncode}: {r.stdout!r} {r.stderr!r}")
        c = run("rping", "-c", "-a", "127.0.0.1", "-p", str(base_port), "-v", "-C", "1")
        expect("with 3 REQs lost the client still connects, and its ping comes back", c.returncode == 0 and
               "ping data: rdma-ping-0" in c.stdout, f"exit {c.returncode}: {c.stdout + c.stderr!r}")
    server.stop()

    server = Server(base_port + 2)
    servers.append(server)
    if expect("another rping -s listens", server.wait_listening(), "its CM socket never showed"):
        r = inject("CM_DROP", "--message", "REP")
        expect("CM_DROP REP is armed in the server", r.returncode == 0 and "lose the next 16 REP" in r.stdout,
               f"exit {r.returncode}: {r.stdout!r} {r.stderr!r}")
        expect_client_fails("with every REP lost the client gets UNREACHABLE (-ETIMEDOUT) and fails", base_port + 2,
                            "cma event RDMA_CM_EVENT_UNREACHABLE, error -110")
    server.stop()

    # ---- ADDR_CHANGE and DEVICE_FATAL's DEVICE_REMOVAL on a server bound to the port
    server = Server(base_port + 1)
    servers.append(server)
    if expect("a second rping -s listens", server.wait_listening(), "its CM socket never showed"):
        r = inject("ADDR_CHANGE", "--device", "sim0", "--port", "1")
        expect("ADDR_CHANGE reaches the listener", r.returncode == 0 and "1 event(s) delivered" in r.stdout,
               f"exit {r.returncode}: {r.stdout!r} {r.stderr!r}")
        expect("rping prints the ADDR_CHANGE it does not handle",
               server.wait_line("RDMA_CM_EVENT_ADDR_CHANGE"), repr(server.seen))
        r = inject("DEVICE_FATAL", "--device", "sim0")
        expect("DEVICE_FATAL is delivered", r.returncode == 0, f"exit {r.returncode}: {r.stdout!r} {r.stderr!r}")
        expect("rping gets DEVICE_REMOVAL", server.wait_line("cma detected device removal"), repr(server.seen))
        try:
            code = server.proc.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            code = None
        expect("rping ends after DEVICE_REMOVAL, with an error", code not in (None, 0), f"exit {code}")
finally:
    for s in servers:
        s.stop()

tally.finish()
