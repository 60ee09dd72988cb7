#!/usr/bin/env python3
"""Fails on a test assertion over a measured time or rate.

    tests/suite/no_timed_assertions.py SOURCE_DIR

A step time, a speed-up, a throughput or an elapsed time depends on what else the machine is
doing, so a test that asserts one fails on a busy machine while the code is right. Such figures
belong in bench/, beside their baseline. This reads every doctest assertion (CHECK, REQUIRE,
WARN and their variants) in tests/, and every `check` line of the shell tests, and fails on one
that names a measured quantity, unless tests/suite/timed_assertions_allowed.txt lists it with the reason
it holds on any machine. An allowlist entry that matches nothing fails too, so the list stays short
and true.
"""
import pathlib
import re
import sys

# Names of measured times and rates, as the runtime's metrics and the tests spell them.
MEASURED = re.compile(
    r"_ms\b|_ms\"|\bms\b|_us\b|_us\"|tokens_per_s|tok/s|\bmfu\b|\bMFU\b|steady_clock|\bseconds\b|elapsed|\btook\b|"
    r"busbw|algbw|gflops|GFLOP|speed|throughput|step_time")
ASSERTION = re.compile(r"\b(CHECK|REQUIRE|WARN)(_FALSE|_EQ|_NE|_LT|_GT|_LE|_GE|_MESSAGE|_UNARY|_UNARY_FALSE)?\s*\(")
# What names a quantity only to test that it is there: a column's length, its emptiness.
PRESENCE = re.compile(r"\.(size|empty)\(\)|\bhas\(|\.find\(")
# What compares a quantity with a bound.
COMPARES = re.compile(r" (<|>|<=|>=) |Approx")


def statements(text):
    """(line number, text) of each assertion, from its macro to its balanced closing parenthesis."""
    for m in ASSERTION.finditer(text):
        depth, i = 0, m.end() - 1
        while i < len(text):
            c = text[i]
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    break
            elif c == '"':  # skip a string literal, whose parentheses do not count
                i += 1
                while i < len(text) and text[i] != '"':
                    i += 2 if text[i] == "\\" else 1
            i += 1
        yield text.count("\n", 0, m.start()) + 1, " ".join(text[m.start():i + 1].split())


def shell_checks(text):
    for n, line in enumerate(text.splitlines(), 1):
        if re.match(r"\s*check\s+\S", line):
            yield n, line.strip()


def measured_names(text):
    """Variables and lambdas of a file that hold a measured figure: `x = <expression naming one>`
    (`const double slow = busbw();`, `exposed = warm_mean(m, "exposed_comm_ms")`), and once more
    the ones computed from those (`share = exposed / step`). Names of two letters or fewer are
    left out: they are loop indices and results, too common to follow."""
    assignment = re.compile(r"\b(\w{3,})\s*=\s*([^;=][^;]*?)(?:;|,\s*\w+\s*=)")
    direct = {m.group(1) for m in assignment.finditer(text) if MEASURED.search(m.group(2))}
    derived = {m.group(1) for m in assignment.finditer(text)
               if any(re.search(rf"\b{n}\b", m.group(2)) for n in direct) and re.search(r"[/*]", m.group(2))}
    return direct | derived


def flagged(root):
    for path in sorted((root / "tests").rglob("*")):
        if path.suffix not in (".cpp", ".hpp", ".sh") or "fuzz" in path.relative_to(root).parts:
            continue
        text = path.read_text(errors="replace")
        names = measured_names(text) if path.suffix != ".sh" else set()
        found = statements(text) if path.suffix != ".sh" else shell_checks(text)
        for line, stmt in found:
            counts = re.sub(r"\.size\(\) *[<>=]+ *\d+", "", stmt)  # a count against a number is no figure
            via = any(re.search(rf"\b{n}\b", stmt) for n in names) and COMPARES.search(counts)
            if (MEASURED.search(stmt) or via) and not (PRESENCE.search(stmt) and not COMPARES.search(counts)):
                yield str(path.relative_to(root)), line, stmt


def allowlist(root):
    entries = []
    for n, line in enumerate((root / "tests" / "suite" / "timed_assertions_allowed.txt").read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 3 or not all(parts):
            sys.exit(f"timed_assertions_allowed.txt:{n}: expected 'FILE | TEXT OF THE ASSERTION | REASON'")
        entries.append((n, *parts))
    return entries


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    allowed = allowlist(root)
    used = set()
    bad = []
    for file, line, stmt in flagged(root):
        hit = [e for e in allowed if e[1] == file and (e[2] == "*" or e[2] in stmt)]
        if hit:
            used.update(e[0] for e in hit)
        else:
            bad.append(f"{file}:{line}: {stmt}")
    stale = [f"timed_assertions_allowed.txt:{n}: '{text}' in {file} matches no assertion" for n, file, text, _ in allowed
             if n not in used]
    for b in bad:
        print(f"asserts a measured time or rate (move it to bench/, or list why it holds on any machine): {b}")
    for s in stale:
        print(s)
    print(f"{len(bad) + len(stale)} problems in the assertions over measured quantities; {len(used)} allowed, each with its reason")
    return 1 if bad or stale else 0


if __name__ == "__main__":
    sys.exit(main())
