#!/usr/bin/env python3
"""SIMVERBS_TRACE and SIMVERBS_SEED: the same seed and the same single-threaded program write a
byte-identical trace; another seed changes the choices the trace records.

  trace_check.py VERBS_CONFORMANCE SIM_LIBDIR BACKENDS_DIR PROFILE.json FABRIC_PREFIX

The program is verbs-conformance run on a few single-threaded tests, each run on a fresh fabric.
"""
import json
import os
import subprocess
import sys
import tempfile

# Protocol timers run on the real clock (scaled), so a test that leaves a message to time out
# traces its retransmission wherever the timer happens to fire: ReceiverEntersErr_RecvCqOverrun's
# requester resends the SEND the receiver (now in ERR) dropped, 2 ms after it, which a loaded
# machine can put before the test's next post. WrStartToCompleteIsAPerQpCriticalSection posts
# from two threads at once: which goes first is the threads' race, not the seed's.
STEADY_TESTS = ("QpDatapathTest.*:SrqTest.*:CqOverrunTest.*-CqOverrunTest.ReceiverEntersErr_RecvCqOverrun"
                ":QpDatapathTest.WrStartToCompleteIsAPerQpCriticalSection")
# With srq_order "any" the seeded scheduler chooses which SRQ receive each message takes.
SEEDED_TEST = "SrqTest.ReceivesTakenInPostingOrder"


def trace(binary, libdir, backends_dir, profile, fabric, seed, tests, out):
    env = dict(os.environ, LD_LIBRARY_PATH=libdir, SIMVERBS_PROFILE=profile, SIMVERBS_FABRIC=fabric,
               SIMVERBS_SEED=str(seed), SIMVERBS_TRACE=out)
    subprocess.run([binary, "--backends-dir", backends_dir, "--gtest_filter=" + tests], env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    with open(out, "rb") as f:
        return f.read()


def received_wr_ids(data):
    """The wr_ids of the receive completions a trace records, in order."""
    ids = []
    for line in data.splitlines():
        if b" cqe " in line and b"opcode=RECV" in line:
            ids.append(int(line.split(b"wr_id=")[1].split()[0], 16))
    return ids


def body(data):
    """The trace without its header line (which names the seed)."""
    return b"".join(line for line in data.splitlines(keepends=True) if not line.startswith(b"#"))


def main():
    binary, libdir, backends_dir, profile, fabric = sys.argv[1:6]
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        first = trace(binary, libdir, backends_dir, profile, fabric + "-1", 7, STEADY_TESTS, tmp + "/first")
        second = trace(binary, libdir, backends_dir, profile, fabric + "-2", 7, STEADY_TESTS, tmp + "/second")
        lines = first.splitlines()
        print(f"seed 7 twice: {len(lines)} lines; identical: {first == second}")
        if first != second:
            problems.append(f"two runs with SIMVERBS_SEED=7 differ: cmp {tmp}/first {tmp}/second")
            for a, b in zip(first.splitlines(), second.splitlines()):
                if a != b:
                    problems.append(f"first difference: {a!r} vs {b!r}")
                    break
        if not lines or lines[0] != f"# simverbs trace seed=7 profile=sim-ib".encode():
            problems.append(f"header is {lines[:1]!r}")
        for kind in (b" wqe ", b" cqe ", b" state ", b" async "):
            if not any(kind in line for line in lines):
                problems.append(f"no{kind.decode()}line in the trace")

        with open(profile) as f:
            adversarial = json.load(f)
        adversarial.setdefault("behaviour", {})["srq_order"] = "any"
        any_order = tmp + "/any-order.json"
        with open(any_order, "w") as f:
            json.dump(adversarial, f)
        runs = {}
        for i, seed in enumerate([1, 1, 2, 3]):
            data = trace(binary, libdir, backends_dir, any_order, f"{fabric}-s{i}", seed, SEEDED_TEST,
                         f"{tmp}/seed{i}")
            runs.setdefault(seed, []).append(body(data))
            # Each of the test's 8 SRQ receives is taken by exactly one message: none lost or
            # taken twice, whichever the scheduler chose.
            taken = received_wr_ids(data)
            if sorted(taken) != list(range(8)):
                problems.append(f"srq_order any, seed {seed}: receives completed {taken}, not each of 0..7 once")
        same = runs[1][0] == runs[1][1]
        differs = runs[1][0] != runs[2][0] or runs[1][0] != runs[3][0]
        print(f"srq_order any: seed 1 twice identical: {same}; seeds 2 or 3 differ from seed 1: {differs}")
        if not same:
            problems.append("srq_order any: two runs with SIMVERBS_SEED=1 differ")
        if not differs:
            problems.append("srq_order any: seeds 1, 2 and 3 gave the same trace")
    for p in problems:
        print("trace_check:", p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
