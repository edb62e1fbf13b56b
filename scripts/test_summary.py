#!/usr/bin/env python3
"""Prints the results of the meson test runs in the given build dirs: one line
per suite and a closing 'N passed, N failed, N skipped' line. GoogleTest
programs count their test cases; other test programs count as one test."""
import collections
import json
import os
import re
import sys


def counts(test):
    """Counter of passed/failed/skipped for one meson test."""
    out = test.get("stdout") or ""
    c = collections.Counter()
    # A program that prints its own verdict (verbs-conformance counts
    # deviations apart from failures) is taken at its word.
    own = re.findall(r"^(\d+) passed, (\d+) failed(?:, (\d+) skipped)?$", out, re.M)
    if own:
        c["passed"], c["failed"], c["skipped"] = (int(x or 0) for x in own[-1])
        if test["result"] not in ("OK", "SKIP") and c["failed"] == 0:
            c["failed"] = 1
        return c
    m = re.search(r"^\[  PASSED  \] (\d+) test", out, re.M)
    if m:
        c["passed"] = int(m.group(1))
        m = re.search(r"^\[  SKIPPED \] (\d+) test", out, re.M)
        c["skipped"] = int(m.group(1)) if m else 0
        m = re.search(r"^\[  FAILED  \] (\d+) test", out, re.M)
        c["failed"] = int(m.group(1)) if m else 0
        if test["result"] not in ("OK", "SKIP") and c["failed"] == 0:
            c["failed"] = 1  # the program failed outside its test cases (crash, sanitizer, exit code)
        return c
    key = {"OK": "passed", "SKIP": "skipped", "EXPECTEDFAIL": "passed"}.get(test["result"], "failed")
    c[key] = 1
    return c


totals = collections.Counter()
for builddir in sys.argv[1:]:
    log = os.path.join(builddir, "meson-logs", "testlog.json")
    if not os.path.exists(log):
        continue
    per_suite = collections.defaultdict(collections.Counter)
    for line in open(log):
        test = json.loads(line)
        m = re.match(r"[^:]*:(\S+) / ", test["name"])
        per_suite[m.group(1) if m else "?"].update(counts(test))
    for suite, c in sorted(per_suite.items()):
        print(f"{builddir:12} {suite:8} {c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped")
        totals.update(c)
print(f"{totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped")
