#!/usr/bin/env python3
"""Pool the back-to-back pairs of several bench runs into one verdict per comparison.

Usage: bench/pool_pairs.py OUTPUT... (saved stdout of gateway.sh, local-ratelimit.sh, or any
script whose paired lines come from paired_verdict in bench/lib/common.sh).

One run's 16-32 pairs resolve a ratio to a few percent on a noisy machine. Several runs of the
same code, pooled, resolve it better. Each comparison (matched by its name) gets the median
of all its pairs, a bootstrap 90% interval of that median (the same fixed seed and rule as
paired_verdict), and the geometric mean. The goal is read from the runs' own lines.
"""

import random
import re
import statistics
import sys

LINE = re.compile(r"^(.*), median of \d+ back-to-back pairs = [\d.]+(?: \(90% CI [^)]*\))?(.*)$")
GOAL = re.compile(r"goal >= ([\d.]+)")


def main(paths):
    pairs, goals = {}, {}
    for path in paths:
        lines = open(path, encoding="utf-8").read().splitlines()
        for line, following in zip(lines, lines[1:] + [""]):
            m = LINE.match(line)
            if not m or "per pair:" not in following:
                continue
            name = m.group(1)
            pairs.setdefault(name, []).extend(float(x) for x in following.split("per pair:")[1].split())
            goal = GOAL.search(m.group(2))
            if goal:
                goals[name] = float(goal.group(1))
    if not pairs:
        sys.exit("no paired lines found (expected paired_verdict output with per-pair ratios)")
    for name, ratios in pairs.items():
        rng = random.Random(1)
        boot = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(2000))
        lo, hi = boot[int(0.05 * len(boot))], boot[int(0.95 * len(boot)) - 1]
        median = statistics.median(ratios)
        goal = goals.get(name)
        if goal is None:
            verdict = ""
        elif lo >= goal:
            verdict = f"  [PASS, goal >= {goal}]"
        elif hi < goal:
            verdict = f"  [FAIL, goal >= {goal}]"
        else:
            side = "above" if median >= goal else "below"
            verdict = f"  [TIE (within noise), median {side}, goal >= {goal}]"
        print(f"{name}, {len(ratios)} pairs pooled: median {median:.3f} (90% CI {lo:.3f}-{hi:.3f}),"
              f" geometric mean {statistics.geometric_mean(ratios):.3f}{verdict}")


if __name__ == "__main__":
    main(sys.argv[1:])
