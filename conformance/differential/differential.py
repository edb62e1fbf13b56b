#!/usr/bin/env python3
"""The rxe differential check: runs verbs-differential on kernel Soft-RoCE in the QEMU VM
(scripts/rxe-vm) and on the simulator with the profile that claims to reproduce it, and compares
the two traces object by object.

  differential.py --program PROG --simverbs CLI --differences FILE [--profile P] [--fabric NAME]
                  [--rxe-trace FILE] [--keep DIR] [--timeout SECS] [--scenario NAME]...
  differential.py --compare RXE.json SIM.json --differences FILE
  differential.py --self-test

Every (scenario, object, field) whose value differs between the traces must be listed in the
differences file with a reason and a source (fixtures/FORMAT.md, "Differential check"); a listed
one that no longer differs fails too, so the list never goes stale. A scenario that could not run
on either side fails. --rxe-trace compares against a saved rxe trace instead of booting the VM;
--keep DIR keeps both traces there.

Exit status: 0 when the traces agree up to the listed differences, 1 when they do not, 2 on bad
usage or a malformed differences file, 124/125 when the VM timed out / could not start.
"""
import argparse
import fnmatch
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# A source names a file of the kernel's rxe driver, the kernel's RDMA core or rdma-core.
SOURCE_PREFIXES = ("drivers/infiniband/", "providers/rxe/", "libibverbs/", "net/", "include/")


class BadDifferences(Exception):
    pass


def load_differences(path):
    """The listed differences, in file order; BadDifferences if the file is malformed."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise BadDifferences(f"{path}: {e}") from e
    if not isinstance(data, dict) or not isinstance(data.get("differences"), list):
        raise BadDifferences(f"{path}: wants an object with a \"differences\" array")
    unknown = set(data) - {"reference", "profile", "description", "differences"}
    if unknown:
        raise BadDifferences(f"{path}: unknown field(s) {sorted(unknown)}")
    listed = []
    seen = set()
    for i, entry in enumerate(data["differences"]):
        where = f"{path}: differences[{i}]"
        if not isinstance(entry, dict):
            raise BadDifferences(f"{where}: not an object")
        fields = {"scenario", "object", "path", "reason", "source"}
        if set(entry) != fields:
            raise BadDifferences(f"{where}: wants exactly the fields {sorted(fields)}, has {sorted(entry)}")
        for key in fields:
            if not isinstance(entry[key], str) or not entry[key].strip():
                raise BadDifferences(f"{where}.{key}: wants a non-empty string")
        if not entry["source"].startswith(SOURCE_PREFIXES):
            raise BadDifferences(f"{where}.source: name the kernel or rdma-core file (and function) it comes from, "
                                 f"starting with one of {list(SOURCE_PREFIXES)}; got {entry['source']!r}")
        key = (entry["scenario"], entry["object"], entry["path"])
        if key in seen:
            raise BadDifferences(f"{where}: {' '.join(key)} is listed twice")
        seen.add(key)
        # "completions[*]" matches completions[0], completions[3].status, ...
        pattern = re.escape(entry["path"]).replace(r"\[\*\]", r"\[\d+\]")
        listed.append(dict(entry, _path_re=re.compile(f"^{pattern}(?=$|[.\\[])")))
    return listed


MISSING = object()


def leaf_differences(r, s, path=""):
    """(path, rxe value, sim value) for every place where the two JSON values differ."""
    if isinstance(r, dict) and isinstance(s, dict):
        for key in sorted(set(r) | set(s)):
            yield from leaf_differences(r.get(key, MISSING), s.get(key, MISSING), f"{path}.{key}" if path else key)
    elif isinstance(r, list) and isinstance(s, list) and any(isinstance(v, dict) for v in r + s):
        # A list of records (completions, calls) is compared record by record; a list of names
        # (events, wc_flags) is one value.
        for i in range(max(len(r), len(s))):
            yield from leaf_differences(r[i] if i < len(r) else MISSING, s[i] if i < len(s) else MISSING,
                                        f"{path}[{i}]")
    elif r != s:
        yield path, r, s


def matches(entry, scenario, obj, path):
    return (fnmatch.fnmatchcase(scenario, entry["scenario"]) and fnmatch.fnmatchcase(obj, entry["object"])
            and entry["_path_re"].match(path) is not None)


def shown(value):
    return "(none)" if value is MISSING else json.dumps(value, sort_keys=True, separators=(",", ":"))


def compare(rxe, sim, listed):
    """Returns (report lines, failure count)."""
    lines = []
    failures = 0
    used = set()
    rxe_scenarios = rxe.get("scenarios", {})
    sim_scenarios = sim.get("scenarios", {})
    for name in sorted(set(rxe_scenarios) | set(sim_scenarios)):
        if name not in rxe_scenarios or name not in sim_scenarios:
            lines.append(f"FAIL {name}: ran only on {'rxe' if name in rxe_scenarios else 'the simulator'}")
            failures += 1
            continue
        r, s = rxe_scenarios[name], sim_scenarios[name]
        errors = [f"rxe: {e}" for e in r.get("errors", [])] + [f"sim: {e}" for e in s.get("errors", [])]
        if errors:
            lines.append(f"FAIL {name}: could not run: " + "; ".join(errors))
            failures += 1
            # Not compared, so its entries cannot be called stale.
            used.update(i for i, e in enumerate(listed) if fnmatch.fnmatchcase(name, e["scenario"]))
            continue
        r_objects, s_objects = r.get("objects", {}), s.get("objects", {})
        unlisted, expected = [], {}
        for obj in sorted(set(r_objects) | set(s_objects)):
            for path, r_val, s_val in leaf_differences(r_objects.get(obj, {}), s_objects.get(obj, {})):
                hit = next((i for i, e in enumerate(listed) if matches(e, name, obj, path)), None)
                if hit is None:
                    unlisted.append(f"    {obj} {path}: rxe {shown(r_val)}, sim {shown(s_val)}")
                else:
                    used.add(hit)
                    expected.setdefault(hit, []).append(f"{obj} {path}")
        failures += len(unlisted)
        lines.append(f"{'FAIL' if unlisted else 'ok  '} {name}: {len(unlisted)} unlisted differences, "
                     f"{sum(map(len, expected.values()))} listed")
        lines += unlisted
        for i, where in expected.items():
            lines.append(f"    listed: {listed[i]['object']} {listed[i]['path']} ({len(where)} place(s))")
    for i, entry in enumerate(listed):
        if i not in used:
            failures += 1
            lines.append(f"FAIL stale entry {entry['scenario']} {entry['object']} {entry['path']}: the traces agree "
                         f"there; delete it from the differences file")
    return lines, failures


def run_rxe(program, out, timeout, scenarios):
    """Runs the program in the VM against rxe0; the port scenario takes dummy0 down and up."""
    guest = ('exec "$0" --device "$RXE_DEV" --port-down-cmd "ip link set $RXE_NETDEV down" '
             '--port-up-cmd "ip link set $RXE_NETDEV up" --output "$1" "${@:2}"')
    # -r 1: a guest kernel crash costs one more boot, not a red run.
    cmd = [os.path.join(ROOT, "scripts", "rxe-vm"), "-t", str(timeout), "-r", "1", "-w", os.path.dirname(out), "--",
           "bash", "-c", guest, os.path.abspath(program), out] + [a for s in scenarios for a in ("--scenario", s)]
    rc = subprocess.run(cmd, stdout=sys.stderr).returncode
    if rc in (124, 125):
        print(f"differential: the rxe VM {'ran out of time' if rc == 124 else 'could not start or set up rxe0'} "
              f"(exit {rc}; details: scripts/rxe-vm -v -- true)", file=sys.stderr)
        return rc
    if not os.path.exists(out):
        print(f"differential: verbs-differential wrote no trace in the VM (exit {rc})", file=sys.stderr)
        return rc or 1
    return 0


def run_sim(program, simverbs, profile, fabric, out, device, scenarios):
    env = dict(os.environ, SIMVERBS_FABRIC=fabric)
    cmd = [simverbs, "run", "--profile", profile, "--", program, "--device", device, "--output", out]
    cmd += [a for s in scenarios for a in ("--scenario", s)]
    # verbs-differential ends itself after 240 s (--time-limit); this only backs that up.
    rc = subprocess.run(cmd, env=env, stdout=sys.stderr, timeout=300).returncode
    if not os.path.exists(out):
        print(f"differential: verbs-differential wrote no trace on the simulator (exit {rc})", file=sys.stderr)
        return rc or 1
    return 0


def report(rxe_path, sim_path, listed):
    with open(rxe_path, encoding="utf-8") as f:
        rxe = json.load(f)
    with open(sim_path, encoding="utf-8") as f:
        sim = json.load(f)
    lines, failures = compare(rxe, sim, listed)
    print("\n".join(lines))
    print(f"differential: {'OK' if failures == 0 else f'{failures} failure(s)'}")
    return 0 if failures == 0 else 1


def self_test():
    def trace(objects, errors=None):
        scenario = {"objects": objects}
        if errors:
            scenario["errors"] = errors
        return {"scenarios": {"s": scenario}}

    entry = {"scenario": "s", "object": "cq", "path": "completions[0].status", "reason": "r",
             "source": "drivers/infiniband/sw/rxe/x.c"}
    a = trace({"cq": {"completions": [{"status": "success"}], "cqe": 7}})
    b = trace({"cq": {"completions": [{"status": "Work Request Flushed Error"}], "cqe": 3}})
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "d.json")

        def loads(content):
            with open(path, "w", encoding="utf-8") as f:
                json.dump(content, f)
            try:
                return load_differences(path)
            except BadDifferences:
                return None

        def listed(**change):
            return loads({"differences": [dict(entry, **change), dict(entry, path="cqe")]})

        checks = [
            ("equal traces pass", compare(a, a, [])[1] == 0),
            ("unlisted differences fail, one per leaf", compare(a, b, [])[1] == 2),
            ("listed differences pass", compare(a, b, listed())[1] == 0),
            ("an index wildcard matches", compare(a, b, listed(path="completions[*]"))[1] == 0),
            ("an object glob matches", compare(a, b, listed(object="c*"))[1] == 0),
            ("a path does not cover its sibling", compare(a, b, loads({"differences": [entry]}))[1] == 1),
            ("stale entries fail", compare(a, a, listed())[1] == 2),
            ("a scenario that could not run fails", compare(trace({}, ["x"]), trace({}), [])[1] == 1),
            ("a scenario run on one side only fails", compare(a, {"scenarios": {}}, [])[1] == 1),
            ("an entry without a source is refused",
             loads({"differences": [{k: v for k, v in entry.items() if k != "source"}]}) is None),
            ("a source that names no file is refused", loads({"differences": [dict(entry, source="rxe")]}) is None),
            ("an unknown top-level field is refused", loads({"diferences": []}) is None),
            ("a duplicate entry is refused", loads({"differences": [entry, entry]}) is None),
        ]
    for what, ok in checks:
        print(f"{'ok  ' if ok else 'FAIL'} {what}")
    return 0 if all(ok for _, ok in checks) else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--program", help="verbs-differential")
    parser.add_argument("--simverbs", help="the simverbs CLI")
    parser.add_argument("--differences", help="the listed differences (fixtures/backends/rxe-6.1-differential.json)")
    parser.add_argument("--profile", default="rxe-6.1")
    parser.add_argument("--device", default="rxe0", help="the device name on the simulator (as in the profile)")
    parser.add_argument("--fabric", default=f"differential-{os.getpid()}", help="SIMVERBS_FABRIC for the simulator")
    parser.add_argument("--rxe-trace", help="a saved rxe trace: do not boot the VM")
    parser.add_argument("--keep", help="directory to keep rxe.json and sim.json in")
    parser.add_argument("--timeout", type=int, default=300, help="time limit of the VM, boot included")
    parser.add_argument("--scenario", action="append", default=[])
    parser.add_argument("--compare", nargs=2, metavar=("RXE", "SIM"))
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    if not args.differences:
        parser.error("--differences is required")
    try:
        listed = load_differences(args.differences)
    except BadDifferences as e:
        print(f"differential: {e}", file=sys.stderr)
        return 2
    if args.compare:
        return report(args.compare[0], args.compare[1], listed)
    if not args.program or not args.simverbs:
        parser.error("--program and --simverbs are required (or --compare)")
    if args.scenario:
        # A partial run cannot tell a stale entry from a scenario that did not run.
        listed = [e for e in listed if any(fnmatch.fnmatchcase(s, e["scenario"]) for s in args.scenario)]
    with tempfile.TemporaryDirectory(prefix="differential.") as tmp:
        work = os.path.abspath(args.keep) if args.keep else tmp
        os.makedirs(work, exist_ok=True)
        rxe_path, sim_path = os.path.join(work, "rxe.json"), os.path.join(work, "sim.json")
        for path in (rxe_path, sim_path):
            if os.path.exists(path) and path != args.rxe_trace:
                os.remove(path)
        if args.rxe_trace:
            rxe_path = args.rxe_trace
        else:
            if os.geteuid() != 0:
                print("differential: the rxe side needs root (scripts/rxe-vm exports / to a QEMU VM)", file=sys.stderr)
                return 2
            rc = run_rxe(args.program, rxe_path, args.timeout, args.scenario)
            if rc:
                return rc
        rc = run_sim(os.path.abspath(args.program), args.simverbs, args.profile, args.fabric, sim_path, args.device,
                     args.scenario)
        if rc:
            return rc
        return report(rxe_path, sim_path, listed)


if __name__ == "__main__":
    sys.exit(main())
