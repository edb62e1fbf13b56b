#!/usr/bin/env python3
"""Merges verbs-conformance JUnit XML files into one Markdown matrix on stdout.

  conformance_report.py FILE.xml...
      a row per test, a column per backend, each cell one of
        pass | **fail** | skip (reason) | deviation (reason) | **unexpected pass** | - (not in that run)
      then one line of counts per backend.
  conformance_report.py --draft-deviations FILE.xml BACKEND.json
      the "deviations" array for BACKEND.json from the tests that failed in FILE.xml (a run made
      without deviation entries): entries already in BACKEND.json keep their reason and source,
      new ones get TODO to fill in.

A column is named after its file: results/conformance-rxe.xml -> "rxe", conformance-sim.xml ->
"sim", conformance-hw-mlx5_0.xml -> "hw-mlx5_0" (a "backend" property on the root element, if
there is one, wins). verbs-conformance marks a listed deviation with the testcase properties
"deviation" (the reason) and "conformance_outcome" ("deviation" or "unexpected-pass").
"""
import collections
import json
import os
import re
import sys
import xml.etree.ElementTree as ET

Result = collections.namedtuple("Result", "outcome reason")  # outcome: pass fail skip deviation unexpected-pass


def one_line(text):
    return " ".join((text or "").split())


def skip_reason(case):
    skipped = case.find("skipped")
    text = skipped.get("message") if skipped is not None else ""
    lines = [line for line in (text or "").splitlines() if line.strip()]
    # GoogleTest puts "file:line" first; SKIP_IF adds "skipped: ".
    if lines and re.match(r"^\S+:\d+$", lines[0].strip()):
        lines = lines[1:]
    reason = one_line(" ".join(lines))
    return re.sub(r"^skipped:\s*", "", reason) or "no reason given"


def load(path):
    """(column name, {test: Result}) of one JUnit XML file; order kept."""
    root = ET.parse(path).getroot()
    name = None
    for prop in root.iter("property"):
        if prop.get("name") == "backend":
            name = prop.get("value")
            break
    if root.get("backend"):
        name = root.get("backend")
    if not name:
        stem = os.path.basename(path)
        stem = stem[:-4] if stem.endswith(".xml") else stem
        name = stem[len("conformance-"):] if stem.startswith("conformance-") and stem != "conformance-" else stem
    results = {}
    for case in root.iter("testcase"):
        test = f"{case.get('classname')}.{case.get('name')}"
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        failed = case.find("failure") is not None or case.find("error") is not None
        if case.get("result") == "skipped" or case.find("skipped") is not None:
            results[test] = Result("skip", skip_reason(case))
        elif props.get("conformance_outcome") == "unexpected-pass":
            results[test] = Result("unexpected-pass", props.get("deviation", ""))
        elif failed and (props.get("conformance_outcome") == "deviation" or "deviation" in props):
            results[test] = Result("deviation", one_line(props.get("deviation", "")))
        elif failed:
            failure = case.find("failure")
            if failure is None:
                failure = case.find("error")
            lines = [line for line in (failure.get("message") or "").splitlines() if line.strip()]
            results[test] = Result("fail", one_line(lines[0]) if lines else "")
        elif case.get("status") == "notrun":
            results[test] = Result("skip", "disabled")
        else:
            results[test] = Result("pass", "")
    return name, results


def cell(result):
    if result is None:
        return "-"
    text = {
        "pass": "pass",
        "fail": "**fail**",
        "skip": f"skip ({result.reason})",
        "deviation": f"deviation ({result.reason})",
        "unexpected-pass": "**unexpected pass**",
    }[result.outcome]
    return text.replace("|", "\\|")


def report(paths):
    columns = []  # (name, results)
    rows = []
    seen = set()
    for path in paths:
        try:
            name, results = load(path)
        except (OSError, ET.ParseError) as error:
            print(f"conformance report: {path}: {error}", file=sys.stderr)
            return 2
        taken = {c[0] for c in columns}
        if name in taken:
            n = 2
            while f"{name} ({n})" in taken:
                n += 1
            name = f"{name} ({n})"
        columns.append((name, results))
        for test in results:
            if test not in seen:
                seen.add(test)
                rows.append(test)
    if not columns:
        print("conformance report: no JUnit XML files given", file=sys.stderr)
        return 2

    print("# verbs-conformance results\n")
    for (name, _), path in zip(columns, paths):
        print(f"- **{name}**: `{path}`")
    print()
    print("| test | " + " | ".join(name for name, _ in columns) + " |")
    print("|---|" + "---|" * len(columns))
    for test in rows:
        print(f"| `{test}` | " + " | ".join(cell(results.get(test)) for _, results in columns) + " |")
    print()
    for name, results in columns:
        counts = collections.Counter(r.outcome for r in results.values())
        parts = [f"{counts['pass']} pass", f"{counts['fail']} fail", f"{counts['deviation']} deviation",
                 f"{counts['skip']} skip"]
        if counts["unexpected-pass"]:
            parts.append(f"{counts['unexpected-pass']} unexpected pass")
        missing = len(rows) - len(results)
        if missing:
            parts.append(f"{missing} not run")
        print(f"- {name}: " + ", ".join(parts))
    return 0


def draft_deviations(xml_path, backend_path):
    _, results = load(xml_path)
    known = {}
    if os.path.exists(backend_path):
        with open(backend_path, encoding="utf-8") as f:
            known = {d["test"]: d for d in json.load(f).get("deviations", [])}
    entries = []
    for test, result in results.items():
        if result.outcome not in ("fail", "deviation"):
            continue
        entry = known.get(test) or {"test": test, "reason": "TODO: " + result.reason, "source": "TODO"}
        entries.append(entry)
    print(json.dumps({"deviations": entries}, indent=2), flush=True)
    gone = sorted(set(known) - {e["test"] for e in entries})
    for test in gone:
        print(f"conformance report: {test} no longer fails: its entry is dropped", file=sys.stderr)
    print(f"conformance report: {len(entries)} failing tests ({len(entries) - len(set(known) & {e['test'] for e in entries})} "
          f"new, {len(gone)} dropped)", file=sys.stderr)
    return 0


def main(argv):
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if argv and argv[0] == "--draft-deviations":
        if len(argv) != 3:
            print("usage: conformance_report.py --draft-deviations FILE.xml BACKEND.json", file=sys.stderr)
            return 2
        return draft_deviations(argv[1], argv[2])
    return report(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
