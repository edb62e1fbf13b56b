#!/usr/bin/env python3
"""A simulator profile that models a real backend gives that backend's answers.

  profile_answers_check.py VERBS_CONFORMANCE SIM_LIBDIR BACKENDS_DIR PROFILE.json BACKEND FABRIC

Runs the conformance suite on the simulator with device profile PROFILE.json against the answers of
BACKENDS_DIR/BACKEND.json (its named questions: CQ overrun, events rxe does not raise, ...). The
backend's listed deviations are dropped first: where the backend breaks the man page the simulator
follows the man page, and fixtures/backends/<BACKEND>-differential.json says so. Every test that runs
must then pass, so a profile knob that stops matching its backend's answer fails here by name.
"""
import json
import os
import subprocess
import sys
import tempfile


def main():
    binary, libdir, backends_dir, profile, backend, fabric = sys.argv[1:7]
    with open(os.path.join(backends_dir, backend + ".json")) as f:
        answers = json.load(f)
    dropped = len(answers.get("deviations", []))
    answers["deviations"] = []
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, backend + ".json"), "w") as f:
            json.dump(answers, f)
        env = dict(os.environ, LD_LIBRARY_PATH=libdir, SIMVERBS_PROFILE=profile, SIMVERBS_FABRIC=fabric)
        proc = subprocess.run([binary, "--backend", backend, "--backends-dir", tmp], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240)
    failed = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("FAILED: ")]
    summary = [line for line in proc.stdout.splitlines() if line.endswith("skipped")]
    print(f"profile {os.path.basename(profile)} with the answers of {backend} ({dropped} deviations dropped): "
          + (summary[-1] if summary else "no summary"))
    if proc.returncode != 0 or failed:
        print(proc.stdout[-20000:])
        for name in failed:
            print(f"profile_answers_check: {name} fails: the profile does not give {backend}'s answer",
                  file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
