#!/usr/bin/env python3
"""Verdicts on back-to-back pairs of runs (paired_ratio in bench/lib/common.sh).

  paired.py verdict GOAL      stdin: "NAME<TAB>MEDIAN<TAB>r1 r2 ..." (one paired_ratio line);
                              prints the verdict line and the per-pair ratios. GOAL "-": none.
  paired.py pool OUTPUT...    saved stdout of bench runs: pools each comparison's pairs (matched
                              by name) across the runs into one median, interval and verdict.

The interval is a bootstrap of the median over the pairs, with a fixed seed so that the same
numbers always print the same. The verdict is PASS when the whole interval is at or above the
goal, FAIL when it is all below, and TIE (within noise) when it straddles the goal. On the
2-core VMs these benches run on, one binary against itself differs by up to 30% per pair. A
difference of a few percent therefore needs many pairs to show, and a ratio near 1.0 can land
on either side.
"""

import random
import re
import statistics
import sys


def interval(ratios):
    """Bootstrap 90% interval of the median of `ratios`."""
    rng = random.Random(1)
    boot = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(2000))
    return boot[int(0.05 * len(boot))], boot[int(0.95 * len(boot)) - 1]


def verdict(median, lo, hi, goal):
    if lo >= goal:
        return f"[PASS, goal >= {goal}]"
    if hi < goal:
        return f"[FAIL, goal >= {goal}]"
    side = "above" if median >= goal else "below"
    return f"[TIE (within noise), median {side}, goal >= {goal}]"


def one(goal):
    name, median, pairs = sys.stdin.read().rstrip("\n").split("\t")
    ratios = [float(r) for r in pairs.split()]
    lo, hi = interval(ratios)
    head = f"{name}, median of {len(ratios)} back-to-back pairs = {median} (90% CI {lo:.3f}-{hi:.3f})"
    if goal == "-":
        print(f"{head}, pairs from {min(ratios):.3f} to {max(ratios):.3f}")
    else:
        print(f"{head}  {verdict(float(median), lo, hi, float(goal))}")
    print(f"  per pair: {pairs}")


# A verdict line as `one` prints it (older runs have no interval).
LINE = re.compile(r"^(.*), median of \d+ back-to-back pairs = [\d.]+(?: \(90% CI [^)]*\))?(.*)$")
GOAL = re.compile(r"goal >= ([\d.]+)")


def pool(paths):
    pairs, goals = {}, {}
    for path in paths:
        lines = open(path, encoding="utf-8").read().splitlines()
        for line, following in zip(lines, lines[1:] + [""]):
            m = LINE.match(line)
            if not m or "per pair:" not in following:
                continue
            name = m.group(1)
            ratios = following.split("per pair:")[1].split()
            pairs.setdefault(name, []).extend(float(r) for r in ratios)
            goal = GOAL.search(m.group(2))
            if goal:
                goals[name] = float(goal.group(1))
    if not pairs:
        sys.exit("no paired lines with per-pair ratios found")
    for name, ratios in pairs.items():
        lo, hi = interval(ratios)
        median = statistics.median(ratios)
        goal = goals.get(name)
        tail = "" if goal is None else "  " + verdict(median, lo, hi, goal)
        print(f"{name}, {len(ratios)} pairs pooled: median {median:.3f} (90% CI {lo:.3f}-{hi:.3f}),"
              f" geometric mean {statistics.geometric_mean(ratios):.3f}{tail}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "verdict":
        one(sys.argv[2])
    elif len(sys.argv) >= 3 and sys.argv[1] == "pool":
        pool(sys.argv[2:])
    else:
        sys.exit(__doc__)
