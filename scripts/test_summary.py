#!/usr/bin/env python3
"""Prints the results of the meson test runs in the given build dirs: one line
per suite and a closing 'N passed, N failed, N skipped' line."""
import collections
import json
import os
import sys

totals = collections.Counter()
for builddir in sys.argv[1:]:
    log = os.path.join(builddir, "meson-logs", "testlog.json")
    if not os.path.exists(log):
        continue
    per_suite = collections.defaultdict(collections.Counter)
    for line in open(log):
        t = json.loads(line)
        result = {"OK": "passed", "SKIP": "skipped", "EXPECTEDFAIL": "passed"}.get(t["result"], "failed")
        for suite in t.get("suite", ["?"]):
            per_suite[suite.split(":")[-1]][result] += 1
        totals[result] += 1
    for suite, c in sorted(per_suite.items()):
        print(f"{builddir:12} {suite:8} {c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped")
print(f"{totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped")
