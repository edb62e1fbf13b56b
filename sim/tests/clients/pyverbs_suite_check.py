#!/usr/bin/env python3
"""Runs rdma-core's own Python test suite (Debian's python3-pyverbs and rdma-core packages) on the
simulator and requires no error and no failure; every skipped test must be skipped for a reason
listed in SKIP_REASONS below, each with why it is right for the simulator.

usage: pyverbs_suite_check.py SIMVERBS_CLI PROFILE [DEVICE]

The suite is shipped gzipped in /usr/share/doc/rdma-core/tests; it is unpacked into a temporary
directory and run there as `python3 run_tests.py --dev DEVICE -v` (DEVICE default sim0) under
`simverbs run --profile PROFILE --sysfs` (the devices under /sys/class/infiniband with `lo` as their net
interface, where pyverbs' rdma_cm tests look for an IP address).
"""
import gzip
import os
import re
import shutil
import subprocess
import sys
import tempfile

SUITE = "/usr/share/doc/rdma-core/tests"

# (regular expression on the skip message, why the simulator skips it)
SKIP_REASONS = [
    (r"Can not run the test over non (MLX5|EFA) device|Could not open mlx5 context|This is not an MLX5 device",
     "vendor-specific (mlx5dv / efadv) tests; rxe skips them too"),
    (r"cuda-python .* must be installed|Allocating dmabuf is not supported|PCI device must be passed",
     "GPU / dma-buf / VFIO hardware; rxe skips them too"),
    (r"ODP is not supported|ODP implicit is not supported",
     "on-demand paging is not simulated (no IBV_ODP caps); rxe 6.1 skips them too"),
    (r"Device memory is not supported", "device memory (ibv_alloc_dm) is not simulated; rxe skips them too"),
    (r"Must be run by root on Ethernet link layer|To Create RAW QP must be done by root on Ethernet link layer",
     "raw packet QPs and flow steering need a NIC; rxe skips them too"),
    (r"Create QP type 8 is not supported|Create Raw Packet QP .*is not supported",
     "raw packet QPs (flow steering, RSS) need a NIC; rxe skips them too"),
    (r"Parent Domain is not supported", "parent domains are not simulated; rxe skips them too"),
    (r"Tag matching is not supported", "tag matching is not simulated; rxe skips them too"),
    (r"There are no huge pages of size 2M allocated|Huge pages of size 2M is not supported",
     "the machine has no 2 MiB huge pages reserved (a machine setting, not the device)"),
    (r"Query device real time is not supported|Converting timestamp to nanoseconds is not supported",
     "completion timestamps are not simulated; rxe skips them too"),
    (r"Importing a device is not supported", "ibv_import_device needs a kernel command fd; rxe skips it too"),
    (r"Extended QP is not supported on this device",
     "test_qp_ex_rc_atomic_write: IBTA 1.5 ATOMIC WRITE is not simulated (rxe 6.1 fails that test)"),
    (r"Link layer of port=1 is InfiniBand , skip RoCE test", "a RoCE-only check, on an InfiniBand profile"),
    (r"No supported port is up, can't run traffic",
     "a test that picks a RoCE GID type the profile does not list; rxe skips it too"),
]


def unpack(dest):
    shutil.copytree(SUITE, dest)
    for root, _, files in os.walk(dest):
        for name in files:
            if name.endswith(".gz"):
                path = os.path.join(root, name)
                with gzip.open(path, "rb") as src, open(path[:-3], "wb") as out:
                    shutil.copyfileobj(src, out)
                os.remove(path)


def parse(output):
    """{test id: (verdict, skip message or None)} from unittest's -v output."""
    results = {}
    current = None
    for line in output.splitlines():
        m = re.match(r"^(test_\S+) \((\S+)\)", line)
        if m:
            current = m.group(2)
        # The verdict ends the test's line, or has a line of its own after what the test printed.
        m = re.search(r"(?:\.\.\. |^)(ok|ERROR|FAIL|expected failure|unexpected success|skipped (.*))$", line)
        if m and current:
            results[current] = ("skip", m.group(2).strip("'\"")) if m.group(2) else (m.group(1), None)
            current = None
    return results


def main():
    cli, profile = os.path.abspath(sys.argv[1]), sys.argv[2]
    device = sys.argv[3] if len(sys.argv) > 3 else "sim0"
    if not os.path.isfile(os.path.join(SUITE, "run_tests.py")):
        print(f"pyverbs_suite_check: {SUITE}/run_tests.py is missing: install rdma-core and python3-pyverbs "
              "(scripts/bootstrap does)", file=sys.stderr)
        return 1
    # `--sysfs` needs a mount namespace (root, or unprivileged user namespaces). Where the machine
    # allows neither (some containers), the rdma_cm tests skip as they do without a net interface.
    sysfs = subprocess.run([cli, "run", "--profile", profile, "--sysfs", "--", "true"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    run_options = ["--sysfs"] if sysfs.returncode == 0 else []
    if not run_options:
        print("pyverbs_suite_check: no mount namespace here, so the rdma_cm tests will skip:",
              sysfs.stdout.strip())
        SKIP_REASONS.append((r"doesn't have net interface",
                             "rdma_cm tests: `simverbs run --sysfs` cannot make a mount namespace on this machine"))
    with tempfile.TemporaryDirectory() as tmp:
        tests = os.path.join(tmp, "tests")
        unpack(tests)
        proc = subprocess.run([cli, "run", "--profile", profile, *run_options, "--", "/usr/bin/python3", "run_tests.py",
                               "--dev", device, "-v"], cwd=tests, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=900)
    results = parse(proc.stdout)
    ran = re.search(r"^Ran (\d+) tests?", proc.stdout, re.M)
    problems = []
    if not ran or int(ran.group(1)) == 0:
        problems.append("the suite ran no test")
    elif int(ran.group(1)) != len(results):
        problems.append(f"unittest ran {ran.group(1)} tests but {len(results)} verdicts were read from its output")
    counts = {}
    skip_counts = {}
    for test, (verdict, message) in sorted(results.items()):
        counts[verdict] = counts.get(verdict, 0) + 1
        if verdict == "skip":
            why = next((w for pattern, w in SKIP_REASONS if re.search(pattern, message)), None)
            if why is None:
                problems.append(f"{test} skipped for a reason not accounted for: {message}")
            else:
                skip_counts[why] = skip_counts.get(why, 0) + 1
        elif verdict != "ok":
            problems.append(f"{test}: {verdict}")
    print(f"pyverbs suite on {profile} ({device}): " + ", ".join(f"{n} {v}" for v, n in sorted(counts.items())))
    for why, n in sorted(skip_counts.items(), key=lambda kv: -kv[1]):
        print(f"  {n:3d} skipped: {why}")
    if proc.returncode != 0 and not problems:
        problems.append(f"run_tests.py exited with {proc.returncode}")
    if problems:
        print(proc.stdout[-30000:])
        for p in problems:
            print("pyverbs_suite_check:", p, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
