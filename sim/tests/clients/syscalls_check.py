#!/usr/bin/env python3
"""Busy-polling perftest pairs make no system call per message on the simulator, but the copy of a
one-copy SEND.

usage: syscalls_check.py SIMVERBS_CLI FABRIC BASE_PORT

Each perftest (64-byte messages unless said; polling mode) runs as server and client, each under its own
`strace -f -c` (every thread: the application's, the progress thread, the timer thread), once with
SHORT iterations (start-up and teardown, next to nothing else) and once with N. The difference
between the two runs divided by N - SHORT is that process's system calls per message. (Not runs of
N and 2N: a system call made on some messages only, as when a spinning thread catches a producer
between two steps, varies from run to run as much as it grows with N, and the difference hides it.)
Two kinds are taken off:
  - process_vm_writev: an RDMA WRITE into another process's private memory is placed by the
    requester with one call (sim/src/fabric/fabric.h, "One-copy WRITE"); it is the copy, not
    overhead. The WRITE runs are made again with each side's buffer in a file of its own that it
    maps shared (perftest --mmap, in /dev/shm): the writer maps that file too and copies with no
    system call, so there process_vm_writev counts like any other;
  - timed looks, whatever the message count: the progress thread looks at its ring every
    millisecond while the program polls, the timer thread at its QPs' deadlines every 2 ms while
    messages are in flight (up to TIMED_LOOKS_PER_MS per millisecond the longer run took in addition).
Each side must stay under 0.05 per message; a system call on every message (or on every tenth)
would show as 1 (0.1).

ib_send_bw with 64 KiB SENDs is the one-copy SEND (sim/src/fabric/fabric.h): its server reads each
SEND from the client's buffer with one process_vm_readv, and its client makes none. That call is
counted on its own and must come once per message (0.95 to 1.05): a SEND that went through the
rings instead (no read) or was read twice shows. The other calls stay under the bound.
"""
import os
import sys
import tempfile

import perftest_pair
from check_tally import Tally

cli, fabric, base_port = sys.argv[1], sys.argv[2], int(sys.argv[3])
BOUND = 0.05
TIMED_LOOKS_PER_MS = 1.5  # the progress thread's 1 ms and the timer thread's 2 ms
PLACEMENT = "process_vm_writev"
PULL = "process_vm_readv"
PULLS_PER_MESSAGE = (0.95, 1.05)
SHORT = 100
# (program, message size, N, mmap, side whose PULL is the copy): N large enough that a cost on one
# message in ten would show in the thousands. mmap: each side's buffer is a file in /dev/shm it maps
# shared.
CASES = [("ib_send_lat", 64, 20000, False, None), ("ib_write_lat", 64, 10000, False, None),
         ("ib_read_lat", 64, 20000, False, None), ("ib_send_bw", 64, 100000, False, None),
         ("ib_write_bw", 64, 50000, False, None), ("ib_read_bw", 64, 50000, False, None),
         ("ib_write_lat", 64, 10000, True, None), ("ib_write_bw", 64, 50000, True, None),
         ("ib_send_bw", 65536, 20000, False, "server")]
MMAP_FILE_BYTES = 64 << 20  # sparse; more than a 64-byte run's buffers
env = dict(os.environ, SIMVERBS_FABRIC=fabric)
tally = Tally()
port = [base_port]


def run_pair(prog, size, n, mmap, tmp, shm):
    """Runs one pair, each side under its own strace (and with a buffer file of its own in `shm` when
    `mmap`); returns {side: {syscall: calls}, "ms": the client's run time}, or an error string."""
    port[0] += 1
    paths = {side: os.path.join(tmp, f"{prog}-{n}-{side}") for side in ("server", "client")}
    buffers = {side: os.path.join(shm, f"{prog}-{side}") for side in ("server", "client")}
    if mmap:
        for path in buffers.values():
            with open(path, "wb") as f:
                f.truncate(MMAP_FILE_BYTES)

    def strace(side):
        traced = "all" if mmap else f"!{PLACEMENT}"
        return ["strace", "-f", "-c", "--seccomp-bpf", "-e", f"trace={traced}", "-o", paths[side]]

    result = perftest_pair.run_pair(cli, env, [prog, "-s", str(size), "-n", str(n)], port[0], wrap=strace,
                                    args=lambda side: [f"--mmap={buffers[side]}"] if mmap else [])
    if isinstance(result, str):
        return result
    return {"ms": result["ms"], **{side: perftest_pair.strace_calls(path) for side, path in paths.items()}}


with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory(dir="/dev/shm") as shm:
    for prog, size, n, mmap, puller in CASES:
        name = prog + (f" {size} B" if size != 64 else "") + (" --mmap" if mmap else "")
        once = run_pair(prog, size, SHORT, mmap, tmp, shm)
        twice = run_pair(prog, size, n, mmap, tmp, shm) if isinstance(once, dict) else once
        if not tally.expect(f"{name} ran", isinstance(twice, dict), twice if isinstance(twice, str) else ""):
            continue
        timed_looks = TIMED_LOOKS_PER_MS * max(0.0, twice["ms"] - once["ms"])
        for side in ("server", "client"):
            more = {call: twice[side].get(call, 0) - once[side].get(call, 0)
                    for call in set(twice[side]) | set(once[side]) if mmap or call != PLACEMENT}
            if puller:
                pulls = more.pop(PULL, 0) / (n - SHORT)
                low, high = PULLS_PER_MESSAGE if side == puller else (0, BOUND)
                print(f"{name:20} {side:6}: {pulls:.3f} {PULL} per message")
                tally.expect(f"{name} {side} {PULL}", low <= pulls < high,
                             f"{pulls:.3f} {PULL} per message; expected {low} to {high}")
            per_message = (sum(more.values()) - timed_looks) / (n - SHORT)
            top = ", ".join(f"{call} {count:+d}" for call, count in
                            sorted(more.items(), key=lambda item: -abs(item[1]))[:4])
            detail = (f"run of {n} minus run of {SHORT}: {top or 'nothing'}; {timed_looks:.0f} timed looks allowed "
                      f"({once['ms']:.0f} and {twice['ms']:.0f} ms)")
            print(f"{name:20} {side:6}: {per_message:.3f} system calls per message ({detail})")
            tally.expect(f"{name} {side}", per_message < BOUND,
                         f"{per_message:.3f} system calls per message ({detail}); bound {BOUND}")
tally.finish()
