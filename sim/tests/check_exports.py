#!/usr/bin/env python3
"""Compares the dynamic symbol table of one of the simulator's drop-in libraries
(libibverbs.so.1, librdmacm.so.1) with the system's rdma-core library of the same
soname, read now with objdump -T (not a list checked in). Every (symbol, version,
default-or-not) of the system library must be there, nothing else may be, except
libibverbs' own SIMVERBS_1 node.

usage: check_exports.py SIM_LIB [SYSTEM_LIB]
"""
import os
import re
import subprocess
import sys


def soname(path):
    name = os.path.basename(path)
    return name[:name.index(".so.") + 5] if ".so." in name else name


def system_library(name):
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        m = re.match(r"\s*" + re.escape(name) + r" \(libc6,x86-64\) => (\S+)", line)
        if m:
            return m.group(1)
    sys.exit(f"check_exports: the system {name} is not installed (apt-get install libibverbs1 librdmacm1)")


def exports(path):
    """{(name, version, is_default)} of the defined, versioned dynamic symbols."""
    out = subprocess.run(["objdump", "-T", path], capture_output=True, text=True, check=True).stdout
    result = set()
    for line in out.splitlines():
        if "*UND*" in line:
            continue
        fields = line.split()
        if len(fields) < 3:
            continue
        version, name = fields[-2], fields[-1]
        hidden = version.startswith("(")
        version = version.strip("()")
        if not re.match(r"^[A-Z]+_[0-9A-Z_.]+$", version):
            continue
        result.add((name, version, not hidden))
    return result


def main():
    sim = sys.argv[1]
    system = sys.argv[2] if len(sys.argv) > 2 else system_library(soname(sim))
    want = exports(system)
    have = exports(sim)
    own = {e for e in have if e[1] == "SIMVERBS_1"}
    missing = sorted(want - have)
    extra = sorted(have - want - own)
    fmt = lambda e: f"{e[0]}{'@@' if e[2] else '@'}{e[1]}"
    for e in missing:
        print("missing:", fmt(e))
    for e in extra:
        print("extra:  ", fmt(e))
    print(f"system {system}: {len(want)} pairs; simulator {sim}: {len(have - own)} pairs "
          f"+ {len(own)} in SIMVERBS_1; {len(missing)} missing, {len(extra)} extra")
    if not want:
        sys.exit("check_exports: read no symbols from the system library")
    if soname(sim) == "libibverbs.so.1" and not any(e[1] == "SIMVERBS_1" and e[0] == "simverbs_version"
                                                    for e in own):
        print("missing: simverbs_version@@SIMVERBS_1")
        sys.exit(1)
    sys.exit(1 if missing or extra else 0)


if __name__ == "__main__":
    main()
