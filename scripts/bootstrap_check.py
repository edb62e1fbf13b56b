#!/usr/bin/env python3
"""Would scripts/bootstrap, on a fresh Debian 12, install what the builds link?

It installs with --no-install-recommends, so a file the builds need must come
from a package it lists or from a hard dependency (Depends/PreDepends) of one:
a package that is only recommended (clang's sanitizer runtimes are) is left
out, and the build then fails on a fresh machine although it passes on one
where someone installed more. For each runtime the sanitizer builds of
scripts/test link, this finds the package that holds it and checks it is in
that closure.

usage: bootstrap_check.py [BOOTSTRAP]
"""
import os
import re
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
bootstrap = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "bootstrap")


def listed_packages(path):
    text = open(path).read()
    body = re.search(r"^packages=\((.*?)^\)", text, re.S | re.M).group(1)
    names = []
    for line in body.splitlines():
        names += line.split("#", 1)[0].split()
    return names


def run(argv):
    return subprocess.run(argv, capture_output=True, text=True).stdout.strip()


def hard_closure(packages):
    out = run(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
               "--no-breaks", "--no-replaces", "--no-enhances"] + packages)
    return {line.strip().split(":")[0] for line in out.splitlines() if line and not line.startswith(" ")}


def owner(path):
    out = run(["dpkg", "-S", os.path.realpath(path)])
    return out.split(":")[0] if out else None


listed = listed_packages(bootstrap)
closure = hard_closure(listed)
resource = run(["clang", "-print-resource-dir"])
needed = {
    "ThreadSanitizer runtime (clang, the TSan build)": os.path.join(resource, "lib/linux/libclang_rt.tsan-x86_64.a"),
    "AddressSanitizer runtime (g++, the ASan build)": run(["g++", "-print-file-name=libasan.so"]),
    "UndefinedBehaviorSanitizer runtime (g++, the ASan build)": run(["g++", "-print-file-name=libubsan.so"]),
}
failures = []
for what, path in needed.items():
    package = owner(path) if path and os.path.exists(path) else None
    if package is None:
        failures.append(f"{what}: {path or '?'} is not installed here, so this check cannot tell who would install it")
    elif package not in closure:
        failures.append(f"{what}: {path} comes from {package}, which {bootstrap} neither lists nor gets as a hard "
                        f"dependency of what it lists (only recommended?): add {package} to its packages")
for f in failures:
    print("FAIL", f)
print(f"{len(needed) - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
