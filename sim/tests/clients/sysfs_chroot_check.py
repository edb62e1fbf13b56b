#!/usr/bin/env python3
"""`simverbs run --sysfs` works in a chroot (a debootstrap root, a package build's), where / is no mount point
and cannot be made private: the mounts that hold /sys/class and /dev are made private instead. The program
there sees the simulated devices under /sys/class/infiniband and /dev/infiniband/uverbs0 as a character
device. (It failed with "making / private: Invalid argument".)

The chroot is a directory of a private mount namespace (unshare -m) holding bind mounts of the system's
/usr, /etc, /proc, /sys, /dev and /tmp, and of the simverbs build and source trees (the profiles): its / is a plain
directory, as a debootstrap root's is. Needs root (skipped otherwise, saying so).

usage: sysfs_chroot_check.py SIMVERBS_CLI FABRIC SOURCE_ROOT
"""
import os
import shutil
import subprocess
import sys
import tempfile

cli, fabric, source = os.path.abspath(sys.argv[1]), sys.argv[2], os.path.abspath(sys.argv[3])
if os.geteuid() != 0:
    print("skip: making a chroot needs root")
    sys.exit(0)

build = os.path.dirname(os.path.dirname(os.path.dirname(cli)))  # build/sim/tools/simverbs -> build
root = tempfile.mkdtemp(prefix="simverbs-chroot-")
try:
    script = ["set -e"]
    for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        if os.path.islink(f"/{top}"):
            script.append(f"ln -s {os.readlink(f'/{top}')} {root}/{top}")  # merged /usr
        elif os.path.isdir(f"/{top}"):
            script.append(f"mkdir {root}/{top} && mount --rbind /{top} {root}/{top}")
    for directory in ("/usr", "/etc", "/proc", "/sys", "/dev", "/tmp", source, build):
        script.append(f"mkdir -p {root}{directory} && mount --rbind {directory} {root}{directory}")
    inside = ("ls /sys/class/infiniband && test -c /dev/infiniband/uverbs0 && echo uverbs0 is a character device")
    script.append(f"SIMVERBS_FABRIC={fabric} chroot {root} {cli} run --sysfs -- sh -c '{inside}'")
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", "\n".join(script)],
                       capture_output=True, text=True, timeout=60)
finally:
    # The bind mounts went with the namespace. Were any still here, removing the tree would remove the
    # system's files through them: then it stays.
    if any(f" {root}" in line for line in open("/proc/self/mountinfo")):
        print(f"FAIL mounts under {root} outlived their namespace; left as it is")
        sys.exit(1)
    shutil.rmtree(root)
out = r.stdout + r.stderr
failures = []
if r.returncode != 0:
    failures.append(f"simverbs run --sysfs in a chroot failed (exit {r.returncode}): {out[-1000:]!r}")
elif "sim0" not in r.stdout.split() or "uverbs0 is a character device" not in r.stdout:
    failures.append(f"in the chroot, /sys/class/infiniband or /dev/infiniband/uverbs0 is not as expected: {out!r}")
else:
    print(f"ok   simverbs run --sysfs in a chroot: /sys/class/infiniband holds {' '.join(r.stdout.split()[:-5])}")
for f in failures:
    print("FAIL", f)
print(f"{1 - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
