#!/usr/bin/env python3
"""Fault plans (SIMVERBS_FAULTS) in a program that knows nothing of them:
each trigger kind fires its action once, on the objects it involves; a broken
plan stops the program with the file and the field.

usage: fault_plan_check.py SIMVERBS_CLI FABRIC
"""
import json
import os
import subprocess
import sys
import tempfile

from check_tally import Tally

cli, fabric = sys.argv[1], sys.argv[2]
loop = ["/usr/bin/python3", os.path.join(os.path.dirname(os.path.abspath(__file__)), "verbs_loop.py")]
tmp = tempfile.mkdtemp(prefix="simverbs-plans-")
tally = Tally()
expect = tally.expect


def run_with_plan(name, plan, *args):
    """Runs verbs_loop.py with `plan` (a dict, or text written as is); returns (exit status, output lines)."""
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        f.write(plan if isinstance(plan, str) else json.dumps(plan))
    env = dict(os.environ, SIMVERBS_FABRIC=fabric, SIMVERBS_FAULTS=path)
    # verbs_loop.py bounds its own waits; this timeout only guards against a hang.
    r = subprocess.run([cli, "run", "--", *loop, *args], capture_output=True, text=True, env=env, timeout=120)
    return r.returncode, r.stdout.splitlines(), r.stderr, path


# A fabric left behind by a killed process would keep its QP number counter:
# the first process to open a device cleans it and, leaving last, removes it.
subprocess.run([cli, "run", "--", "ibv_devinfo"], capture_output=True, env=dict(os.environ, SIMVERBS_FABRIC=fabric),
               timeout=60)


def fault(trigger, action):
    return {"faults": [{"trigger": trigger, "action": action}]}


# post_send: the 3rd post of the first QP created takes it to ERR before the
# post runs, so that WR is flushed; the first two complete.
rc, out, err, _ = run_with_plan("post-send", fault({"post_send": 3, "qp": "#1"}, {"event": "QP_FATAL"}), "4", "1")
qpns = out[0].split()[1:3] if out and out[0].startswith("QPN") else ["?", "?"]
wcs = [line for line in out if line.startswith("WC ")]
expect("post_send: the program ends", rc == 0, f"exit {rc}: {out} {err}")
expect("post_send: posts 1 and 2 succeed", wcs[:4] == [f"WC 1 128 0 {qpns[1]}", f"WC 1 0 0 {qpns[0]}",
                                                      f"WC 2 128 0 {qpns[1]}", f"WC 2 0 0 {qpns[0]}"], repr(wcs))
expect("post_send: post 3 is flushed (IBV_WC_WR_FLUSH_ERR)", f"WC 3 0 5 {qpns[0]}" in wcs, repr(wcs))
expect("post_send: QP_FATAL once", [line for line in out if line.startswith("EVENT")] == ["EVENT 1"], repr(out))

# post_send by QP number: the second QP of a fresh fabric has the same number
# as in the run above (numbers restart when the fabric does).
rc, out, err, _ = run_with_plan("post-send-number", fault({"post_send": 1, "qp": int(qpns[0])},
                                                          {"event": "QP_REQ_ERR"}), "1", "1")
expect("post_send by number: same QP numbers as before", out[:1] and out[0].startswith(f"QPN {qpns[0]} {qpns[1]} "),
       repr(out[:1]))
expect("post_send by number: the first post is flushed and QP_REQ_ERR raised",
       f"WC 1 0 5 {qpns[0]}" in out and "EVENT 2" in out, repr(out))

# wc_error: the 2nd post of QP #1 completes with IBV_WC_REM_OP_ERR (11) instead
# of executing; the RC QP is then in ERR and the 3rd post is flushed (5).
rc, out, err, _ = run_with_plan("wc-error", fault({"post_send": 2, "qp": "#1"}, {"wc_error": "REM_OP_ERR"}), "3", "0")
wcs = [line for line in out if line.startswith("WC ")]
expect("wc_error: the program ends", rc == 0, f"exit {rc}: {out} {err}")
expect("wc_error: post 2 completes with REM_OP_ERR, post 3 is flushed",
       f"WC 2 0 11 {qpns[0]}" in wcs and f"WC 3 0 5 {qpns[0]}" in wcs and f"WC 1 0 0 {qpns[0]}" in wcs, repr(wcs))

# qp_state: after the 2nd completion QP #1 goes to ERR as if the HCA failed it:
# IBV_EVENT_QP_FATAL (1), and its later posts are flushed.
rc, out, err, _ = run_with_plan("qp-state", fault({"completions": 2}, {"qp_state": "ERR", "qp": "#1"}), "3", "1")
expect("qp_state: QP_FATAL and flushed posts",
       rc == 0 and "EVENT 1" in out and f"WC 2 0 5 {qpns[0]}" in out, f"exit {rc}: {out} {err}")

# qp_state SQE on an RC QP cannot apply (SQE is UC's and UD's): nothing happens, and stderr says so.
rc, out, err, _ = run_with_plan("qp-state-refused", fault({"completions": 2}, {"qp_state": "SQE", "qp": "#1"}),
                                "3", "0")
expect("qp_state SQE on an RC QP: the program runs on, and stderr says why nothing happened",
       rc == 0 and "not moved to SQE" in err and "ERR takes" in err, f"exit {rc}: {out} {err}")

# An SRQ event on a QP without an SRQ cannot apply: nothing happens, and stderr says so.
rc, out, err, _ = run_with_plan("srq-event-without-srq",
                                fault({"completions": 2}, {"event": "SRQ_LIMIT_REACHED", "qp": "#1"}), "3", "0")
expect("SRQ_LIMIT_REACHED on a QP without an SRQ: the program runs on, and stderr says why nothing happened",
       rc == 0 and "SRQ_LIMIT_REACHED not raised on QP" in err and "has no SRQ" in err, f"exit {rc}: {out} {err}")

# completions: the 4th completion polled puts the polled CQ in error; the
# next poll fails and CQ_ERR is raised.
rc, out, err, _ = run_with_plan("completions", fault({"completions": 4}, {"event": "CQ_ERR"}), "3", "1")
expect("completions: 4 completions, then the CQ fails", [line.split()[1] for line in out if line.startswith("WC")]
       == ["1", "1", "2", "2"] and "POLL_ERROR 3" in out, repr(out))
expect("completions: CQ_ERR once", [line for line in out if line.startswith("EVENT")] == ["EVENT 0"], repr(out))

# completions with a QP event: the QP of the 3rd completion (the receiver's).
rc, out, err, _ = run_with_plan("completions-qp", fault({"completions": 3}, {"event": "QP_ACCESS_ERR"}), "3", "1")
receiver = out[0].split()[2] if out and out[0].startswith("QPN") else "?"
expect("completions: the QP of the 3rd completion gets QP_ACCESS_ERR and flushes",
       "EVENT 3" in out and f"WC 3 128 5 {receiver}" in out, repr(out))

# The extended verbs count too: an ibv_wr_complete is a post_send call, a
# completion from ibv_start_poll / ibv_next_poll a polled completion.
rc, out, err, _ = run_with_plan("post-send-ex", fault({"post_send": 3, "qp": "#1"}, {"event": "QP_FATAL"}), "4", "1",
                                "extended")
wcs = [line for line in out if line.startswith("WC ")]
expect("post_send, ibv_wr_complete: posts 1 and 2 succeed, post 3 is flushed, QP_FATAL once",
       rc == 0 and f"WC 2 0 0 {qpns[0]}" in wcs and f"WC 3 0 5 {qpns[0]}" in wcs
       and [line for line in out if line.startswith("EVENT")] == ["EVENT 1"], f"exit {rc}: {out} {err}")
rc, out, err, _ = run_with_plan("completions-ex", fault({"completions": 4}, {"event": "CQ_ERR"}), "3", "1", "extended")
expect("completions, ibv_start_poll: 4 completions, then the CQ fails, CQ_ERR once",
       [line.split()[1] for line in out if line.startswith("WC")] == ["1", "1", "2", "2"] and "POLL_ERROR 3" in out
       and [line for line in out if line.startswith("EVENT")] == ["EVENT 0"], f"exit {rc}: {out} {err}")

# after_ms (from the first ibv_open_device): the program waits for the event
# however long the timer takes. LID_CHANGE leaves the port up.
rc, out, err, _ = run_with_plan("after-ms", fault({"after_ms": 0}, {"event": "LID_CHANGE", "device": "sim0", "port": 1}),
                                "1", "1")
expect("after_ms: LID_CHANGE delivered once", [line for line in out if line.startswith("EVENT")] == ["EVENT 11"],
       repr(out))

# DEVICE_FATAL after the 2nd completion: then commands fail with EIO, destroys succeed.
rc, out, err, _ = run_with_plan("fatal", fault({"completions": 2}, {"event": "DEVICE_FATAL"}), "1", "1",
                                "fatal-checks")
expect("DEVICE_FATAL after 2 completions", [line for line in out if line.startswith("EVENT")] == ["EVENT 8"],
       repr(out))
after = dict(line.split()[1:3] for line in out if line.startswith("AFTER"))
expect("after DEVICE_FATAL: commands EIO, query_device/posts/polls/destroys succeed",
       after == {"alloc_pd": "5", "query_port": "5", "create_cq": "5", "query_device": "0", "post_send": "0",
                 "poll_cq": "0", "destroy_qp": "0"}, repr(after))

# Broken plans: the program does not start, and the message names the file and the field.
for name, plan, needle in [
        ("not-json", "{faults: ", "not valid JSON: parse error"),
        ("unknown-field", fault({"completions": 1, "when": 2}, {"event": "CQ_ERR"}), "faults[0].trigger.when: unknown field"),
        ("two-triggers", fault({"completions": 1, "after_ms": 2}, {"event": "CQ_ERR"}), "exactly one of"),
        ("bad-event", fault({"completions": 1}, {"event": "PORT_EXPLODED"}), 'faults[0].action.event: expected an '
         'async event name such as "PORT_ERR" or "QP_FATAL", not "PORT_EXPLODED"'),
        ("misspelt-action", fault({"completions": 1}, {"evnet": "CQ_ERR"}), 'faults[0].action: no action: expected '
         'one of "event"'),
        ("misspelt-action-named", fault({"completions": 1}, {"evnet": "CQ_ERR"}), 'it has "evnet"'),
        ("no-qp", fault({"post_send": 1}, {"event": "QP_FATAL"}), "faults[0].trigger.qp: missing field"),
        ("bad-status", fault({"post_send": 1, "qp": "#1"}, {"wc_error": "OOPS"}), "faults[0].action.wc_error"),
        ("qp-state-needs-qp", fault({"completions": 1}, {"qp_state": "ERR"}), "faults[0].action.qp"),
        ("timed-qp-event", fault({"after_ms": 1}, {"event": "QP_FATAL"}), "faults[0].action.qp"),
        ("bad-device", fault({"after_ms": 1}, {"event": "PORT_ERR", "device": "sim9"}), "faults[0].action.device"),
        ("zero-count", fault({"completions": 0}, {"event": "CQ_ERR"}), "faults[0].trigger.completions"),
        # Beyond a year the deadline would wrap into the past and fire at once.
        ("far-future", fault({"after_ms": 10000000000000}, {"event": "LID_CHANGE"}), "faults[0].trigger.after_ms"),
        # 2^32 + 1 would wrap to port 1.
        ("huge-port", fault({"after_ms": 1}, {"event": "PORT_ERR", "port": 4294967297}), "faults[0].action.port"),
        ("no-faults", {"fault": []}, "plan.faults: missing field")]:
    rc, out, err, path = run_with_plan(name, plan, "0", "0")
    expect(f"broken plan {name}: the program cannot open the device", rc != 0 and "DONE" not in out, f"exit {rc}")
    expect(f"broken plan {name}: file and field in the message", f"SIMVERBS_FAULTS={path}: " in err and needle in err,
           repr(err[:300]))

# Comments are taken, as in profiles (fixtures/FORMAT.md's example has them).
rc, out, err, _ = run_with_plan("comments", '{\n  // a comment\n  "faults": [{"trigger": {"after_ms": 1}, '
                                '"action": {"event": "LID_CHANGE"}}]  /* another */\n}', "0", "1")
expect("a plan with comments loads and fires", rc == 0 and [line for line in out if line.startswith("EVENT")] ==
       ["EVENT 11"], f"exit {rc}: {out} {err[:300]!r}")

env = dict(os.environ, SIMVERBS_FABRIC=fabric, SIMVERBS_FAULTS=os.path.join(tmp, "missing.json"))
r = subprocess.run([cli, "run", "--", "ibv_devinfo"], capture_output=True, text=True, env=env, timeout=60)
expect("a missing plan file is an error, with the reason", r.returncode != 0 and
       "cannot read the fault plan: No such file or directory" in r.stderr, repr(r.stderr))

tally.finish()
