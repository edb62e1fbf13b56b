#!/usr/bin/env python3
"""Busy pollers yield the CPU only when they outnumber the CPUs.

usage: oversubscribed_check.py SIMVERBS_CLI FABRIC BASE_PORT

Rule: a program that polls an empty CQ makes no system call (the data path stays in user space).
When more processes of one fabric poll in a loop than there are CPUs they may run on, the one whose
peer it waits for may be waiting for this CPU: spinning on would hold it for a scheduler time slice,
so every few microseconds of empty polls the poller calls sched_yield (Fabric::PollFoundNothing).

Checks, on an ib_send_bw 64 B pair (server and client, polling mode), counting the client's
sched_yield calls with strace -f -c:
  - both sides pinned to one CPU (two pollers, one CPU): the client yields (at least once);
  - on a machine with two or more CPUs (two pollers, enough CPUs), unpinned, and each side pinned
    to a CPU of its own: it never yields.
"""
import os
import sys
import tempfile

import perftest_pair
from check_tally import Tally

cli, fabric, base_port = sys.argv[1], sys.argv[2], int(sys.argv[3])
N = 20000
env = dict(os.environ, SIMVERBS_FABRIC=fabric)
tally = Tally()
port = [base_port]


def pinned_to(cpus):
    return (lambda: os.sched_setaffinity(0, cpus)) if cpus else None


def yields_of_client(server_cpus, client_cpus, messages):
    """Runs one pair of `messages` messages, each side on its CPUs (None: as inherited); returns the
    client's sched_yield calls, or an error string."""
    port[0] += 1
    cpus = {"server": server_cpus, "client": client_cpus}
    with tempfile.NamedTemporaryFile("r", suffix=".strace") as summary:
        def strace_client(side):
            return ["strace", "-f", "-c", "-e", "trace=sched_yield", "-o", summary.name] if side == "client" else []

        result = perftest_pair.run_pair(cli, env, ["ib_send_bw", "-s", "64", "-n", str(messages)], port[0],
                                        wrap=strace_client, preexec=lambda side: pinned_to(cpus[side]),
                                        timeouts=(("client", 120), ("server", 120)))
        if isinstance(result, str):
            return result
        return perftest_pair.strace_calls(summary.name).get("sched_yield", 0)


allowed = sorted(os.sched_getaffinity(0))
pinned = yields_of_client({allowed[0]}, {allowed[0]}, N)
if tally.expect("pinned to one CPU: the pair ran", isinstance(pinned, int), str(pinned)):
    print(f"pinned to CPU {allowed[0]}: the client called sched_yield {pinned} times in {N} messages")
    tally.expect("pinned to one CPU: the client yields", pinned > 0,
                 "no sched_yield: two busy pollers on one CPU each hold it for a time slice")
if len(allowed) >= 2:
    for case, server_cpus, client_cpus in (("unpinned", None, None),
                                           (f"pinned to CPUs {allowed[0]} and {allowed[1]}", {allowed[0]},
                                            {allowed[1]})):
        # Longer: on a CPU each a pair runs N messages in a few milliseconds, hardly longer than
        # the progress thread takes to count the pollers.
        free = yields_of_client(server_cpus, client_cpus, 20 * N)
        if tally.expect(f"{case}: the pair ran", isinstance(free, int), str(free)):
            print(f"{case}: the client called sched_yield {free} times in {20 * N} messages")
            tally.expect(f"{case}: the client never yields", free == 0,
                         f"{free} sched_yield calls: a poller yields with a CPU for each poller")
else:
    print(f"only {len(allowed)} CPU: the cases with a CPU for each poller need two (not run)")
tally.finish()
