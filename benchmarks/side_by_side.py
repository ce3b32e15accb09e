"""The plugin's side of the side-by-side table (README, Performance): whole processes.

Three DyMT jobs against the loopback fake server, each timed from process start to exit
(imports, collection, every call and the report included), with the whole process's CPU
(pytest and any xdist workers) per call the server answered:

1. 80 seeds x 1 style x 5 turns (2,000 calls), 500 ms per call;
2. the same at 0 ms per call: the client CPU per call;
3. 240 seeds x 1 style x 5 turns (6,000 calls), 200 ms per call.

Bytecode is cached (a private PYTHONPYCACHEPREFIX written by an uncounted first run), as
on any machine that can write it. Prints the median of ``--runs`` runs with the range.

    python benchmarks/side_by_side.py [--runs 3] [--workers 0]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import dymt_latency  # noqa: E402
from dymt_latency import TURNS, run, script, seeds_in  # noqa: E402

from pytest_socialbias.testing import FakeServer  # noqa: E402

JOBS = (
    ("80 seeds x 5 turns, 500 ms per call", "age or gender", 0.5),
    ("80 seeds x 5 turns, 0 ms per call", "age or gender", 0.0),
    ("240 seeds x 5 turns, 200 ms per call", "", 0.2),
)


def one_run(server, folder: Path, marker: str, workers: int) -> tuple[float, float]:
    """(wall s, CPU s) of one whole pytest process and its workers."""
    before = os.times()
    wall = run(server, folder, workers, marker=marker)
    after = os.times()
    return wall, (after.children_user + after.children_system) - (before.children_user + before.children_system)


def spread(values: list[float], fmt: str) -> str:
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=0, help="xdist workers (-n)")
    args = parser.parse_args()
    print(f"DyMT, 1 style, {TURNS} turns, -n {args.workers}; median of {args.runs} runs (min-max)")
    print(f"{'job':<38}  {'calls':>6}  {'wall s':>18}  {'CPU ms per call':>18}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        dymt_latency.ENV.pop("PYTHONDONTWRITEBYTECODE", None)
        dymt_latency.ENV["PYTHONPYCACHEPREFIX"] = str(folder / "pycache")
        (folder / "bench.yaml").write_text(
            "socialbias: 1\nsuite: dymt\nprotocol: dymt\n"
            f"seeds: {seeds_in(folder)}\nstyles: [assessment]\nturns: {TURNS}\n"
        )
        with FakeServer(script) as server:  # uncounted: writes the bytecode cache
            one_run(server, folder, "age", args.workers)
        for name, marker, latency in JOBS:
            with FakeServer(script, latency=latency) as server:
                walls, per_call, calls = [], [], 0
                for _ in range(args.runs):
                    server.clear()
                    wall, cpu = one_run(server, folder, marker, args.workers)
                    calls = server.request_count
                    walls.append(wall)
                    per_call.append(1000 * cpu / calls)
                print(f"{name:<38}  {calls:>6}  {spread(walls, '.2f'):>18}  {spread(per_call, '.2f'):>18}")


if __name__ == "__main__":
    main()
