#!/usr/bin/env python3
"""Checks that every test in conformance/tests cites the rule it checks.

Every TEST / TEST_F / TEST_P (and TYPED_TEST / TYPED_TEST_P) must have, in the
block of // comment lines directly above it, a line starting with "// Rule:"
(the man page sentence or IBTA clause) and a line starting with "// Checks:".

  check_rules.py DIR_OR_FILE...   exit 1 and name file:line for each offender
  check_rules.py --self-test      check the checker on made-up sources
"""
import pathlib
import re
import sys
import tempfile

TEST_MACRO = re.compile(r"^\s*(TEST|TEST_F|TEST_P|TYPED_TEST|TYPED_TEST_P)\s*\(")
COMMENT = re.compile(r"^\s*//")
RULE = re.compile(r"^\s*//\s*Rule:\s*\S")
CHECKS = re.compile(r"^\s*//\s*Checks:\s*\S")


def comment_block_above(lines, index):
    """The // lines directly above lines[index], nearest last."""
    block = []
    i = index - 1
    while i >= 0 and COMMENT.match(lines[i]):
        block.append(lines[i])
        i -= 1
    block.reverse()
    return block


def check_file(path):
    problems = []
    lines = pathlib.Path(path).read_text(encoding="utf-8").splitlines()
    for index, line in enumerate(lines):
        match = TEST_MACRO.match(line)
        if not match:
            continue
        block = comment_block_above(lines, index)
        missing = []
        if not any(RULE.match(c) for c in block):
            missing.append("// Rule:")
        if not any(CHECKS.match(c) for c in block):
            missing.append("// Checks:")
        if missing:
            problems.append(f"{path}:{index + 1}: {match.group(1)} without {' and '.join(missing)} "
                            "in the comment block directly above it")
    return problems


def collect(paths):
    files = []
    for p in map(pathlib.Path, paths):
        if p.is_dir():
            files.extend(sorted(p.glob("*.cc")))
        else:
            files.append(p)
    return files


def run(paths):
    files = collect(paths)
    if not files:
        print(f"check_rules: no .cc files in {' '.join(paths)}", file=sys.stderr)
        return 1
    problems = [p for f in files for p in check_file(f)]
    for problem in problems:
        print(problem)
    tests = sum(1 for f in files for line in pathlib.Path(f).read_text(encoding="utf-8").splitlines()
                if TEST_MACRO.match(line))
    print(f"check_rules: {tests} tests in {len(files)} files, {len(problems)} without a citation")
    return 1 if problems else 0


SELF_TEST_CASES = {
    "good.cc": ("// Rule: ibv_foo(3): \"returns 0\".\n// Checks: it does.\nTEST(A, B) {}\n", 0),
    "no_rule.cc": ("// Checks: it does.\nTEST_F(A, B) {}\n", 1),
    "no_checks.cc": ("// Rule: x\nTEST_P(A, B) {}\n", 1),
    "gap.cc": ("// Rule: x\n// Checks: y\n\nTEST(A, B) {}\n", 1),
    "multiline.cc": ("// Rule: ibv_bar(3): \"a long\n//   sentence\".\n// Checks: z\nTEST(A, C) {}\n", 0),
}


def self_test():
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, (text, want) in SELF_TEST_CASES.items():
            path = pathlib.Path(tmp) / name
            path.write_text(text, encoding="utf-8")
            got = 1 if check_file(path) else 0
            if got != want:
                print(f"self-test: {name}: expected {'a problem' if want else 'no problem'}, got the opposite")
                failures += 1
    print(f"check_rules self-test: {len(SELF_TEST_CASES) - failures} of {len(SELF_TEST_CASES)} cases ok")
    return 1 if failures else 0


def main(argv):
    if argv == ["--self-test"]:
        return self_test()
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    return run(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
