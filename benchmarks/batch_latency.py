"""Batch concurrency: 64 single-turn smoke cases against the fake server at 100 ms a call.

Each case makes 4 calls (user simulator -> target -> bias and refusal judges, the judges
in parallel), so one case's critical path is 3 x 100 ms = 0.3 s. Run sequentially the
batch would take 64 x 4 x 100 ms = 25.6 s. Prints the batch's wall time (the setup phase
of the batch's first item, which runs the whole batch) and the whole pytest run's, for a
few values of --socialbias-concurrency, with their ratio to 100 ms and to the bound
max(critical path, calls x latency / concurrency).

    python benchmarks/batch_latency.py [--cases 64] [--latency 0.1]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_socialbias.testing import FakeServer  # noqa: E402
from tests import fakeworld  # noqa: E402
from tests.conftest import suite_yaml  # noqa: E402

CALLS_PER_CASE = 4
CRITICAL_CALLS = 3


def run_once(server, folder: Path, concurrency: int) -> tuple[float, float]:
    url = server.openai_base_url
    command = [
        sys.executable, "-m", "pytest", "demo.yaml", "-q", "-p", "no:cacheprovider",
        f"--target=openai:t@{url}", f"--judge=openai:j@{url}", f"--user-model=openai:u@{url}",
        "--socialbias-record=off", f"--socialbias-concurrency={concurrency}",
        "--durations=1", "--durations-min=0",
    ]
    env = dict(os.environ, OPENAI_API_KEY="sk-bench")
    started = time.perf_counter()
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    total = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(done.stdout + done.stderr)
    match = re.search(r"^([0-9.]+)s setup ", done.stdout, re.MULTILINE)
    batch = float(match.group(1)) if match else float("nan")
    return batch, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.1)
    args = parser.parse_args()
    cases = [(f"age-{i:03d}", "age", f"Statement number {i}.") for i in range(args.cases)]
    with tempfile.TemporaryDirectory() as tmp, FakeServer(fakeworld.script, latency=args.latency) as server:
        folder = Path(tmp)
        (folder / "demo.yaml").write_text(suite_yaml(cases, batch_size=args.cases))
        calls = args.cases * CALLS_PER_CASE
        print(f"{args.cases} single-turn cases, {calls} calls, {args.latency * 1000:.0f} ms per call; "
              f"sequential would be {calls * args.latency:.1f} s")
        print(f"{'concurrency':>11}  {'batch s':>8}  {'x latency':>9}  {'bound s':>7}  {'x bound':>7}  {'pytest run s':>12}")
        for concurrency in (16, 64, 256):
            bound = max(CRITICAL_CALLS * args.latency, calls * args.latency / concurrency)
            batch, total = run_once(server, folder, concurrency)
            print(f"{concurrency:>11}  {batch:>8.2f}  {batch / args.latency:>9.1f}  {bound:>7.2f}  "
                  f"{batch / bound:>7.2f}  {total:>12.2f}")
            assert server.request_count == calls, server.request_count
            server.clear()


if __name__ == "__main__":
    main()
