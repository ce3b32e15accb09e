"""The top of a py-spy profile of every thread: where a run's CPU went (docs/performance.md,
How to profile).

    py-spy record --threads --subprocesses --gil -r 400 --format raw -o run.txt -- \\
        python -m pytest ...                                  # or any command
    python benchmarks/profile_top.py run.txt [--top 30] [--only pytest_socialbias]

Reads py-spy's raw (collapsed) output, one sampled stack a line with its count, and
prints the share of samples each thread took, then the functions by inclusive share
(samples with the function anywhere on the stack) and by own share (samples where it was
running). With ``--gil`` py-spy samples only the thread holding the interpreter, so the
shares are shares of the CPU spent in Python. Without it, its own test of whether a
thread is idle misses some waits (seen here: an asyncio executor thread waiting for work,
in ``concurrent/futures/thread.py _worker``, and a thread waiting for a lock, were counted
as running, half of a run's samples), and with ``--idle`` the shares are of wall time.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path


def summarise(lines) -> tuple[int, Counter, Counter, Counter]:
    """(samples, by thread, inclusive by function, own by function) of raw py-spy lines."""
    total, threads, inclusive, own = 0, Counter(), Counter(), Counter()
    for line in lines:
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        thread = next((f for f in frames if f.startswith("thread ")), "")
        name = thread.partition("): ")[2].strip()  # "thread (1234): socialbias-loop"
        threads[name or "(unnamed)"] += n
        # "function (file:line)" -> "function (file)": a function's lines counted together.
        functions = [re.sub(r":\d+\)$", ")", f) for f in frames if f.endswith(")") and not f.startswith(("process ", "thread "))]
        for function in set(functions):
            inclusive[function] += n
        if functions:
            own[functions[-1]] += n
    return total, threads, inclusive, own


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path, help="py-spy record --format raw output")
    parser.add_argument("--top", type=int, default=30, help="functions to list (default 30)")
    parser.add_argument("--only", default="", metavar="TEXT", help="list only functions whose name or file holds TEXT")
    args = parser.parse_args(argv)
    total, threads, inclusive, own = summarise(args.profile.read_text().splitlines())
    if not total:
        print(f"{args.profile}: no samples", file=sys.stderr)
        return 1
    print(f"{total} samples")
    print("by thread: " + ", ".join(f"{name} {100 * n / total:.1f}%" for name, n in threads.most_common()))
    for title, counts in (("inclusive", inclusive), ("own", own)):
        print(f"--- {title}")
        rows = [(f, n) for f, n in counts.most_common() if args.only in f][:args.top]
        for function, n in rows:
            print(f"{100 * n / total:5.1f}%  {function}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
