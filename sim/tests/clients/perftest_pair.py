"""One perftest server and client pair on the simulator, each side bounded by a watchdog, and the table
`strace -c` writes of a side."""
import os
import subprocess
import threading
import time

from tcp_listening import wait_listening


def run_pair(cli, env, command, port, wrap=lambda side: [], preexec=lambda side: None,
             timeouts=(("client", 120), ("server", 60)), args=lambda side: []):
    """Runs `cli run -- command -p port` as server, then as client once the server listens; `wrap(side)`
    is put in front of a side's command line (e.g. strace), `args(side)` after `command` (e.g. a
    buffer file of its own), `preexec(side)` (a function or None) runs in its process before it starts
    (e.g. pinning it to CPUs). Returns {side: (output, rusage), "ms": the client's run time}, or an
    error string. A side that does not end in time is killed."""
    def start(side):
        return subprocess.Popen(wrap(side) + [cli, "run", "--"] + command + args(side) + ["-p", str(port)] +
                                (["127.0.0.1"] if side == "client" else []),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                preexec_fn=preexec(side))

    def tail(output, lines):
        # A perftest prints its banner first and its error last: the end is what explains a failure.
        kept = output.splitlines()[-lines:]
        return "\n".join(kept) + ("\n" if kept else "")

    procs = {"server": start("server")}
    if not wait_listening(port, procs["server"], time.time() + 20):
        procs["server"].kill()
        return f"the server never listened:\n{procs['server'].communicate()[0]}"
    procs["client"] = start("client")
    started = time.monotonic()
    result = {}
    outs = []
    for side, timeout in timeouts:
        proc = procs[side]
        # Reaped here, with its resource usage (Popen.wait would reap it first).
        watchdog = threading.Timer(timeout, proc.kill)
        watchdog.start()
        _, status, usage = os.wait4(proc.pid, 0)
        watchdog.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        output = proc.stdout.read()
        outs.append((side, output))
        if side == "client":
            result["ms"] = (time.monotonic() - started) * 1000
        if proc.returncode:
            if side == "client":
                procs["server"].kill()
                procs["server"].wait()
                outs.append(("server", procs["server"].stdout.read()))
            # The side that failed first, then the other's last lines.
            others = "".join(f"--- {other} (last lines):\n{tail(text, 8)}" for other, text in outs if other != side)
            return (f"{' '.join(command)}: {side} exit {proc.returncode} (killed after {timeout} s if -9):\n"
                    f"--- {side} (last lines):\n{tail(output, 25)}{others}")
        result[side] = (output, usage)
    return result


def strace_calls(path):
    """{syscall: calls} from the table `strace -c -o path` wrote (% time, seconds, usecs/call, calls,
    [errors,] name); a syscall never made has no row."""
    table = {}
    for line in open(path):
        fields = line.split()
        if len(fields) >= 5 and fields[3].isdigit() and fields[-1] != "total":
            table[fields[-1]] = int(fields[3])
    return table
