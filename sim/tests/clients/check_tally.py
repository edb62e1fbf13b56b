"""The tally of a check script: every expectation counts, each one that fails is kept with its detail,
and finish() prints them and the summary and ends the script with its exit status."""
import sys


class Tally:
    def __init__(self):
        self.checks = 0
        self.failures = []

    def expect(self, what, cond, detail=""):
        self.checks += 1
        if not cond:
            self.failures.append(f"{what}: {detail}")
        return cond

    def finish(self):
        for f in self.failures:
            print("FAIL", f)
        print(f"{self.checks - len(self.failures)} passed, {len(self.failures)} failed")
        sys.exit(1 if self.failures else 0)
