#!/usr/bin/env python3
"""`simverbs inject` reaches unmodified programs on a fabric.

Unmodified ibv_asyncwatch (ibverbs-utils) prints each of the 8 unaffiliated
events injected from outside; PORT_ERR / PORT_ACTIVE change the port state a
process that starts later reads (ibv_devinfo); an affiliated event reaches
only the process that owns the QP; after DEVICE_FATAL the owner's commands
fail with EIO while destroys succeed; the CLI's errors say how to fix them.

usage: inject_check.py SIMVERBS_CLI FABRIC
"""
import os
import queue
import re
import subprocess
import sys
import threading

from check_tally import Tally

cli, fabric = sys.argv[1], sys.argv[2]
env = dict(os.environ, SIMVERBS_FABRIC=fabric)
here = os.path.dirname(os.path.abspath(__file__))
tally = Tally()
expect = tally.expect
WAIT = 10  # seconds for any one line; a program that says nothing fails the check, never hangs the test


def inject(*args):
    return subprocess.run([cli, "inject", *args], capture_output=True, text=True, env=env, timeout=60)


class Program:
    """A program under `simverbs run` whose stdout lines are read with a timeout."""

    def __init__(self, *argv):
        self.proc = subprocess.Popen([cli, "run", "--", *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=env)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def next_line(self):
        try:
            return self.lines.get(timeout=WAIT)
        except queue.Empty:
            return f"<nothing within {WAIT} s>"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=WAIT)


def port_state():
    r = subprocess.run([cli, "run", "--", "ibv_devinfo", "-d", "sim0"], capture_output=True, text=True, env=env,
                       timeout=60)
    m = re.search(r"state:\s+(\w+)", r.stdout)
    return m.group(1) if m else r.stdout + r.stderr


# ---- errors before any program runs
r = inject("PORT_ERR")
expect("no fabric: exit 2 and how to fix it",
       r.returncode == 2 and f'fabric "{fabric}"' in r.stderr and "simverbs run" in r.stderr,
       f"exit {r.returncode}: {r.stderr!r}")
r = inject("PORT_EXPLODED")
expect("unknown event: exit 2 and the list", r.returncode == 2 and "unknown event" in r.stderr
       and "CLIENT_REREGISTER" in r.stderr, f"exit {r.returncode}: {r.stderr!r}")

watch = Program("ibv_asyncwatch", "-d", "sim0")
programs = [watch]
try:
    first = watch.next_line()
    expect("ibv_asyncwatch starts", "async event FD" in first, repr(first))

    # ---- the 8 unaffiliated events, one line each, in order
    for name, number in [("PORT_ERR", 10), ("PORT_ACTIVE", 9), ("LID_CHANGE", 11), ("PKEY_CHANGE", 12),
                         ("SM_CHANGE", 13), ("CLIENT_REREGISTER", 17), ("GID_CHANGE", 18)]:
        r = inject(name, "--device", "sim0", "--port", "1")
        expect(f"inject {name} succeeds", r.returncode == 0, f"exit {r.returncode}: {r.stdout + r.stderr!r}")
        line = watch.next_line()
        expect(f"ibv_asyncwatch prints {name}", line == f"  event_type IBV_EVENT_{name} ({number}), port 1",
               repr(line))
        if name == "PORT_ERR":
            state = port_state()
            expect("after PORT_ERR a new process reads the port DOWN", state == "PORT_DOWN", repr(state))
        if name == "PORT_ACTIVE":
            state = port_state()
            expect("after PORT_ACTIVE a new process reads the port ACTIVE", state == "PORT_ACTIVE", repr(state))

    # ---- CLI errors with a fabric running
    for args, needle in [(["PORT_ERR", "--device", "sim7"], 'no device "sim7"'),
                         (["PORT_ERR", "--port", "9"], "has no port 9"),
                         (["QP_FATAL"], "give --qp"),
                         (["CQ_ERR"], "--cq-of-qp"),
                         (["LID_CHANGE", "--qp", "17"], "not affiliated"),
                         (["QP_FATAL", "--qp", "zz"], "not a QP number"),
                         (["QP_FATAL", "--qp", "+17"], "not a QP number"),
                         (["QP_FATAL", "--qp", "17", "--port", "1"], "--port is for port events"),
                         (["DEVICE_FATAL", "--port", "1"], "--port is for port events"),
                         # an option the event does not take, even given its default value
                         (["PORT_ERR", "--reason", "28"], "are for CM_REJECT and CM_DROP"),
                         (["CM_REJECT", "--message", "REQ"], "--message is for CM_DROP"),
                         (["CM_DROP", "--reason", "28"], "--reason is for CM_REJECT")]:
        r = inject(*args)
        expect(f"inject {' '.join(args)}: exit 2 with a reason", r.returncode == 2 and needle in r.stderr,
               f"exit {r.returncode}: {r.stderr!r}")
    r = inject("QP_FATAL", "--qp", "0xfffff0")
    expect("a QP nobody owns: exit 1", r.returncode == 1 and "no process" in r.stderr and "owns" in r.stderr,
           f"exit {r.returncode}: {r.stderr!r}")

    # ---- affiliated events reach only their owner
    loop = [sys.executable if "pyverbs" in sys.modules else "/usr/bin/python3", os.path.join(here, "verbs_loop.py")]
    owner = Program(*loop, "1", "3", "fatal-checks")
    other = Program(*loop, "1", "3")
    programs += [owner, other]
    qpns = {}
    for name, prog in (("owner", owner), ("other", other)):
        line = prog.next_line()
        expect(f"{name} reports its QPs", line.startswith("QPN "), repr(line))
        qpns[name] = line.split()[1:4] if line.startswith("QPN ") else ["0", "0", "0"]
        for _ in range(2):
            line = prog.next_line()
            expect(f"{name} completes its SEND and RECV", re.fullmatch(r"WC 1 \d+ 0 \d+", line or ""), repr(line))

    r = inject("QP_FATAL", "--qp", qpns["owner"][0])
    expect("inject QP_FATAL reaches one process", r.returncode == 0 and "1 event(s) delivered" in r.stdout,
           f"exit {r.returncode}: {r.stdout + r.stderr!r}")
    line = owner.next_line()
    expect("the owner gets QP_FATAL", line == "EVENT 1", repr(line))
    r = inject("QP_FATAL", "--qp", qpns["owner"][0])
    expect("QP_FATAL again on the QP it took to ERR: exit 1, no second event",
           r.returncode == 1 and "already in ERR" in r.stderr and "0 event(s) delivered" in r.stdout,
           f"exit {r.returncode}: {r.stdout + r.stderr!r}")
    r = inject("SRQ_LIMIT_REACHED", "--srq-of-qp", qpns["other"][2])
    expect("inject SRQ_LIMIT_REACHED by a QP on the SRQ", r.returncode == 0 and "1 event(s) delivered" in r.stdout,
           f"exit {r.returncode}: {r.stdout + r.stderr!r}")
    line = other.next_line()
    expect("the other process gets its SRQ_LIMIT_REACHED", line == "EVENT 15", repr(line))
    r = inject("CQ_ERR", "--cq-of-qp", hex(int(qpns["other"][1])), "--recv-cq")
    expect("inject CQ_ERR by a QP's receive CQ", r.returncode == 0 and "1 event(s) delivered" in r.stdout,
           f"exit {r.returncode}: {r.stdout + r.stderr!r}")
    line = other.next_line()
    expect("the other process gets its CQ_ERR", line == "EVENT 0", repr(line))
    # (The profile's cq_overrun, cascade: every QP on the CQ goes to ERR, as after an overrun.)
    line = other.next_line()
    expect("then QP_FATAL: the QPs on the CQ fail with it", line == "EVENT 1", repr(line))
    r = inject("SRQ_ERR", "--srq-of-qp", qpns["owner"][0])
    expect("an SRQ event by a QP without an SRQ: exit 1", r.returncode == 1 and "attached to an SRQ" in r.stderr,
           f"exit {r.returncode}: {r.stderr!r}")
    # A port event reaches everyone: each one's next line must be it, so
    # nobody saw the other's affiliated event.
    line = other.next_line()
    expect("the other process ends", line == "DONE", repr(line))
    other.proc.wait(timeout=WAIT)  # an exiting process answers nobody: let it go first
    r = inject("LID_CHANGE")
    expect("inject LID_CHANGE with the default device and port", r.returncode == 0, r.stdout + r.stderr)
    line = owner.next_line()
    expect("the owner did not get the other's CQ_ERR", line == "EVENT 11", repr(line))
    line = watch.next_line()
    expect("ibv_asyncwatch got no affiliated event", line == "  event_type IBV_EVENT_LID_CHANGE (11), port 1",
           repr(line))

    # ---- DEVICE_FATAL: the last event; commands fail with EIO, destroys succeed
    r = inject("DEVICE_FATAL", "--device", "sim0")
    expect("inject DEVICE_FATAL", r.returncode == 0, r.stdout + r.stderr)
    line = watch.next_line()
    expect("ibv_asyncwatch prints DEVICE_FATAL", line == "  event_type IBV_EVENT_DEVICE_FATAL (8), port 0",
           repr(line))
    line = owner.next_line()
    expect("the owner gets DEVICE_FATAL", line == "EVENT 8", repr(line))
    after = {}
    for _ in range(7):
        line = owner.next_line() or ""
        if line.startswith("AFTER "):
            after[line.split()[1]] = line.split()[2]
    expect("after DEVICE_FATAL", after == {"alloc_pd": "5", "query_port": "5", "create_cq": "5",
                                           "query_device": "0", "post_send": "0", "poll_cq": "0",
                                           "destroy_qp": "0"}, repr(after))
    line = owner.next_line()
    expect("the owner ends", line == "DONE", repr(line))
finally:
    for p in programs:
        p.stop()
    # The killed ibv_asyncwatch left its ring behind: the next process to
    # open a device cleans it and, being the last, removes the fabric.
    subprocess.run([cli, "run", "--", "ibv_devinfo"], capture_output=True, env=env, timeout=60)

tally.finish()
