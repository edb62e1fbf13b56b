#!/usr/bin/env python3
"""The simverbs CLI: `run` hands the program its arguments verbatim and puts
the simulator in front of it; a bad profile is a clear error.

usage: cli_check.py SIMVERBS_CLI
"""
import subprocess
import sys

cli = sys.argv[1]
failures = []


def run(*args):
    return subprocess.run([cli, *args], capture_output=True, text=True, timeout=60)


def expect(what, cond, detail):
    if not cond:
        failures.append(f"{what}: {detail}")


r = run("run", "--", "/bin/echo", "a", "--b", "-c", "--")
expect("run passes arguments verbatim", r.returncode == 0 and r.stdout == "a --b -c --\n", repr(r.stdout))

r = run("run", "--profile", "sim-roce", "--", "sh", "-c", 'echo "$SIMVERBS_PROFILE"')
expect("run sets SIMVERBS_PROFILE", r.stdout.strip().endswith("sim-roce.json"), repr(r.stdout))

r = run("run", "--", "ibv_devices")
expect("run puts the simulator first", "sim0" in r.stdout, repr(r.stdout + r.stderr))

r = run("run", "--profile", "no-such-profile", "--", "ibv_devices")
expect("unknown profile exits 2", r.returncode == 2, f"exit {r.returncode}")
expect("unknown profile names the profile and the choices",
       'unknown profile "no-such-profile"' in r.stderr and "sim-ib" in r.stderr, repr(r.stderr))

r = run("run", "--", "/nonexistent/program")
expect("missing program exits 127 with a message", r.returncode == 127 and "cannot run" in r.stderr,
       f"exit {r.returncode}: {r.stderr!r}")

r = run("run")
expect("run without a program is a usage error", r.returncode == 2 and "no program given" in r.stderr, repr(r.stderr))

r = run("devices", "--profile", "sim-ib")
expect("devices lists the profile's devices", "sim0 port 1" in r.stdout, repr(r.stdout))

r = run("run", "--", "/usr/bin/python3", "-c",
        "import pyverbs.device as d; print([x.name.decode() for x in d.get_device_list()])")
expect("pyverbs lists the simulated devices", r.returncode == 0 and "'sim0', 'sim1'" in r.stdout,
       repr(r.stdout + r.stderr))

for f in failures:
    print("FAIL", f)
print(f"{9 - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
