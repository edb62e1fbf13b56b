#!/usr/bin/env python3
"""simverbs record on kernel Soft-RoCE: records rxe0 in the QEMU VM (scripts/rxe-vm, as root) with
--stable-identity over a copy of the checked-in profile (so its description and behaviour stay),
checks that the simulator's loader takes the result (simverbs devices) and that it equals the
checked-in file. A difference means the kernel or rdma-core reports something else now: look at the
diff, then re-record with --update.

usage: rxe_record_check.py SIMVERBS_CLI PROFILE.json [--update] [--timeout SECS]
"""
import argparse
import difflib
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("simverbs")
    parser.add_argument("profile")
    parser.add_argument("--update", action="store_true", help="write the recording over PROFILE.json")
    parser.add_argument("--timeout", type=int, default=120, help="time limit of the VM, boot included")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("rxe_record_check: needs root (scripts/rxe-vm exports / to a QEMU VM)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="rxe-record.") as tmp:
        out = os.path.join(tmp, os.path.basename(args.profile))
        shutil.copyfile(args.profile, out)
        cmd = [os.path.join(ROOT, "scripts", "rxe-vm"), "-t", str(args.timeout), "-r", "1", "-w", tmp, "--",
               os.path.abspath(args.simverbs), "record", "--device", "rxe0", "--stable-identity", out]
        rc = subprocess.run(cmd, stdout=sys.stderr).returncode
        if rc != 0:
            print(f"rxe_record_check: simverbs record in the VM failed (exit {rc})", file=sys.stderr)
            return rc
        r = subprocess.run([args.simverbs, "devices", "--profile", out], capture_output=True, text=True, timeout=60)
        print(r.stdout + r.stderr, end="")
        if r.returncode != 0 or "rxe0 port 1" not in r.stdout:
            print("rxe_record_check: FAIL: the simulator's loader does not take the recorded profile")
            return 1
        with open(args.profile, encoding="utf-8") as f:
            want = f.readlines()
        with open(out, encoding="utf-8") as f:
            got = f.readlines()
        if args.update:
            shutil.copyfile(out, args.profile)
            print(f"rxe_record_check: wrote {args.profile}" + (" (unchanged)" if got == want else ""))
            return 0
        if got != want:
            sys.stdout.writelines(difflib.unified_diff(want, got, args.profile, "recorded in the VM"))
            print(f"rxe_record_check: FAIL: the recording differs from {args.profile}; "
                  f"if rxe really reports this now: {sys.argv[0]} {args.simverbs} {args.profile} --update")
            return 1
        print(f"rxe_record_check: the recording equals {args.profile}")
        return 0


if __name__ == "__main__":
    sys.exit(main())
