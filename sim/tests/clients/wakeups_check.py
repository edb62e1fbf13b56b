#!/usr/bin/env python3
"""Busy-polling perftest pairs cost no wake-up per message on the simulator.

usage: wakeups_check.py SIMVERBS_CLI FABRIC BASE_PORT

Each perftest (64-byte messages, and 64 KiB SENDs; polling mode) runs as server and client, once
with N and once with 2N iterations. A thread that has to be woken (a progress thread asleep on its
futex, a thread waiting for a lock another holds) went to sleep first: a voluntary context switch,
counted by the kernel for every thread of the process (getrusage of the child, no tracer to slow it
down). The difference between the two runs divided by N is that process's switches per message,
start-up and teardown cancelled out. A process also sleeps on a clock, whatever the message count:
its progress thread looks at its ring every millisecond while the program polls, its timer thread
looks at its QPs' retransmit deadlines every 2 ms while messages are in flight. Those timed looks
(up to TIMED_LOOKS_PER_MS per millisecond the longer run took in addition) are taken off. Each side
must stay under 0.05 per message; each wake-up system call per message would show as about one.
"""
import os
import sys

import perftest_pair
from check_tally import Tally

cli, fabric, base_port = sys.argv[1], sys.argv[2], int(sys.argv[3])
BOUND = 0.05
TIMED_LOOKS_PER_MS = 1.5  # the progress thread's 1 ms and the timer thread's 2 ms
# (program, message size, N): N large enough that a per-message cost would show in the thousands.
# 64 KiB SENDs outrun the server's ring: the client's backlog and its flushes are part of the run.
CASES = [("ib_send_lat", 64, 2000), ("ib_write_lat", 64, 2000), ("ib_read_lat", 64, 2000),
         ("ib_send_bw", 64, 20000), ("ib_write_bw", 64, 20000), ("ib_read_bw", 64, 5000),
         ("ib_send_bw", 65536, 5000)]
env = dict(os.environ, SIMVERBS_FABRIC=fabric)
tally = Tally()
port = [base_port]


def run_pair(prog, size, n):
    """Runs one pair; returns {side: voluntary switches, "ms": the client's run time}, or an error string."""
    port[0] += 1
    result = perftest_pair.run_pair(cli, env, [prog, "-s", str(size), "-n", str(n)], port[0])
    if isinstance(result, str):
        return result
    return {"ms": result["ms"], **{side: result[side][1].ru_nvcsw for side in ("server", "client")}}


for prog, size, n in CASES:
    once = run_pair(prog, size, n)
    twice = run_pair(prog, size, 2 * n) if isinstance(once, dict) else once
    prog = f"{prog} -s {size}"
    if not tally.expect(f"{prog} ran", isinstance(twice, dict), twice if isinstance(twice, str) else ""):
        continue
    timed_looks = TIMED_LOOKS_PER_MS * max(0.0, twice["ms"] - once["ms"])
    for side in ("server", "client"):
        per_message = (twice[side] - once[side] - timed_looks) / n
        detail = (f"{once[side]} with N={n} in {once['ms']:.0f} ms, {twice[side]} with 2N in {twice['ms']:.0f} ms, "
                  f"{timed_looks:.0f} timed looks allowed")
        print(f"{prog:22} {side:6}: {per_message:.3f} voluntary context switches per message ({detail})")
        tally.expect(f"{prog} {side}", per_message < BOUND,
                     f"{per_message:.3f} voluntary context switches per message ({detail}); bound {BOUND}")
tally.finish()
