#!/usr/bin/env python3
"""The simverbs CLI: `run` hands the program its arguments verbatim and puts
the simulator in front of it; a bad profile is a clear error.

usage: cli_check.py SIMVERBS_CLI
"""
import os
import shutil
import subprocess
import sys
import tempfile

cli = sys.argv[1]
failures = []


def run(*args):
    return subprocess.run([cli, *args], capture_output=True, text=True, timeout=60)


checks = 0


def expect(what, cond, detail):
    global checks
    checks += 1
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

r = run("frobnicate")
expect("an unknown command exits 2 and names it and the commands",
       r.returncode == 2 and "unknown command 'frobnicate'" in r.stderr and "inject" in r.stderr, repr(r.stderr))

r = run("devices", "--profile", "/tmp")
expect("a directory as profile exits 2 and says so", r.returncode == 2 and "is a directory" in r.stderr,
       f"exit {r.returncode}: {r.stderr!r}")

r = subprocess.run([cli, "run", "--", "sh", "-c", 'echo "$SIMVERBS_PROFILE"'], capture_output=True, text=True,
                   timeout=60, env=dict(os.environ, SIMVERBS_PROFILE="sim-roce"))
expect("run without --profile keeps SIMVERBS_PROFILE", r.stdout.strip().endswith("sim-roce.json"), repr(r.stdout))

with tempfile.TemporaryDirectory() as tmp:
    shutil.copy(os.path.join(os.path.dirname(os.path.abspath(cli)), "..", "..", "..", "fixtures", "devices",
                             "sim-roce.json"), os.path.join(tmp, "mine.json"))
    r = subprocess.run([os.path.abspath(cli), "run", "--profile", "mine.json", "--", "sh", "-c",
                        'echo "$SIMVERBS_PROFILE"'], capture_output=True, text=True, timeout=60, cwd=tmp)
    expect("run exports a relative --profile as an absolute path",
           r.stdout.strip() == os.path.join(os.path.realpath(tmp), "mine.json") or
           r.stdout.strip() == os.path.join(tmp, "mine.json"), repr(r.stdout + r.stderr))

r = run("inject", "PORT_ERR", "--timeout-ms", "0")
expect("inject refuses a timeout of 0 and says what it takes",
       r.returncode != 0 and "timeout-ms" in r.stderr and "1..3600000" in r.stderr, repr(r.stderr))

r = run("inject", "PORT_ERR", "--count", "3")
expect("inject refuses an option the event does not take", r.returncode == 2 and "--count" in r.stderr and
       "CM_REJECT and CM_DROP" in r.stderr, f"exit {r.returncode}: {r.stderr!r}")

r = run("inject", "COMM_EST", "--qp", "0x11", "--cq-of-qp", "0x11")
expect("inject refuses two objects at once", r.returncode == 2 and "one of --qp" in r.stderr,
       f"exit {r.returncode}: {r.stderr!r}")

r = run("run", "--profile", "--", "true")
expect("run --profile without a value says so", r.returncode == 2 and "--profile needs" in r.stderr,
       f"exit {r.returncode}: {r.stderr!r}")

r = subprocess.run([cli, "devices"], capture_output=True, text=True, timeout=60,
                   env=dict(os.environ, SIMVERBS_PROFILE="no-such-profile"))
expect("a bad $SIMVERBS_PROFILE is named as the source of the profile",
       r.returncode == 2 and "$SIMVERBS_PROFILE" in r.stderr, f"exit {r.returncode}: {r.stderr!r}")

r = run("--version")
expect("--version prints the version", r.returncode == 0 and r.stdout.startswith("simverbs "), repr(r.stdout))

with tempfile.TemporaryDirectory() as tmp:
    broken = os.path.join(tmp, "broken.json")
    with open(broken, "w") as f:
        f.write("{\n  \"profile\": \n")
    r = run("devices", "--profile", broken)
    expect("a profile that is not JSON says where, without the parser's class name",
           r.returncode == 2 and "not valid JSON" in r.stderr and "json.exception" not in r.stderr, repr(r.stderr))

for f in failures:
    print("FAIL", f)
print(f"{checks - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
