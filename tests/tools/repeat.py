"""Run chosen test files many times, in shuffled or reversed order, and count failures.

    python tests/tools/repeat.py --runs 30 tests/faults/test_interruption.py
    python tests/tools/repeat.py --runs 10 --order random -n 2 --hog 1 tests
    python tests/tools/repeat.py --runs 5 --order reverse tests/unit/test_cache.py

Each run is a fresh ``python -m pytest`` process. ``--order random`` shuffles with
pytest-randomly, seeded ``--seed-base + run`` (so a failing order can be run again with
``-p randomly --randomly-seed=SEED``); ``reverse`` uses pytest-reverse; ``given`` keeps
collection order. ``--hog N`` keeps N busy-looping processes beside the runs, as a loaded
CI machine would. The summary lists each test that failed, in how many runs, and the
seeds of those runs; the exit status is 1 when any run failed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

HOG = "while True: pass"


def failures(junit: Path) -> list[str]:
    """Node ids of the failed or errored test cases in a JUnit XML file."""
    if not junit.exists():
        return ["(no JUnit file: the run did not finish)"]
    out = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            module = case.get("classname", "").replace(".", "/")
            out.append(f"{module}.py::{case.get('name')}")
    return out


def pytest_args(args, run: int, junit: Path) -> list[str]:
    command = [sys.executable, "-m", "pytest", *args.paths, "-q", "-p", "no:cacheprovider",
               f"--junitxml={junit}", f"--timeout={args.timeout}"]
    if args.order == "random":
        command += ["-p", "randomly", f"--randomly-seed={args.seed_base + run}"]
    else:
        command += ["-p", "no:randomly"]
    if args.order == "reverse":
        command += ["--reverse"]
    if args.n:
        command += ["-n", str(args.n)]
    return command + args.extra


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", help="test files or folders")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--order", choices=("random", "reverse", "given"), default="random")
    parser.add_argument("--seed-base", type=int, default=1000, help="run i is shuffled with seed SEED_BASE + i")
    parser.add_argument("-n", type=int, default=0, help="xdist workers (0: serial)")
    parser.add_argument("--hog", type=int, default=0, help="busy-looping processes beside the runs")
    parser.add_argument("--timeout", type=int, default=900, help="pytest-timeout per test, seconds")
    parser.add_argument("--keep", default="repeat-failures", help="folder for the output of failed runs")
    parser.add_argument("extra", nargs=argparse.REMAINDER, help="after --: more pytest arguments")
    args = parser.parse_args(argv)
    args.extra = [a for a in args.extra if a != "--"]

    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(args.hog)]
    failed_runs: dict[str, list[int]] = defaultdict(list)
    bad_runs = 0
    try:
        with tempfile.TemporaryDirectory() as folder:
            for run in range(args.runs):
                junit = Path(folder) / f"run-{run}.xml"
                started = time.monotonic()
                done = subprocess.run(pytest_args(args, run, junit), capture_output=True, text=True)
                took = time.monotonic() - started
                failed = failures(junit)
                seed = args.seed_base + run if args.order == "random" else "-"
                tail = done.stdout.strip().splitlines()[-1:] or [""]
                print(f"run {run + 1}/{args.runs} seed {seed} exit {done.returncode} {took:.0f}s: {tail[0]}", flush=True)
                if done.returncode not in (0,) or failed:
                    bad_runs += 1
                    keep = Path(args.keep)
                    keep.mkdir(parents=True, exist_ok=True)
                    (keep / f"run-{run + 1}-seed-{seed}.txt").write_text(done.stdout + done.stderr, encoding="utf-8")
                for test in failed:
                    failed_runs[test].append(seed)
    finally:
        for hog in hogs:
            hog.kill()
    if bad_runs:
        print(f"output of the failed runs: {args.keep}/")
    print(f"\n{args.runs - bad_runs} of {args.runs} runs passed ({args.order} order, "
          f"{'-n ' + str(args.n) if args.n else 'serial'}, {args.hog} hog(s))")
    for test, seeds in sorted(failed_runs.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(seeds)}/{args.runs} failed: {test} (seeds: {', '.join(map(str, seeds))})")
    return 1 if bad_runs else 0


if __name__ == "__main__":
    sys.exit(main())
