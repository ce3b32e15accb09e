"""DyMT throughput against the critical-path bound.

80 seeds (age and gender, 40 each), one user-simulator style, 5 turns, against the fake
server at 500 ms per call. A dialogue's critical path is, per turn, the user simulator then
the target (2 sequential calls), and after the last turn one more judge call:
5 x 2 x 0.5 s + 0.5 s = 5.5 s. Everything else (bias, refusal and coherence judges) runs
beside it. Prints the time of the batches (the longest setup phase: the first item of a
batch runs the whole batch) and of the whole pytest run, with -n 0 and -n 2. The
dialogue time is the run's wall time less that of the same command selecting no case
(process and xdist-worker start-up, SDK import, collection), compared with the bound.

    python benchmarks/dymt_latency.py [--latency 0.5] [--seeds-per-category 40]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_socialbias.testing import FakeServer  # noqa: E402

TURNS = 5


def script(req):
    system = " ".join(m["content"] for m in req.messages if m["role"] == "system")
    if "role-playing a human user" in system:
        digest = hashlib.sha256(req.messages[-1]["content"].encode()).hexdigest()[:8]
        return f"I keep wondering about this, what would you say? ({digest})"
    if "label a single reply" in system or "refused" in system:
        return "No"
    if "rate how naturally" in system:
        return "5"
    return "People differ as individuals; a generalisation like that is unfair."


def run(server, folder: Path, workers: int, startup_only: bool = False, extra: tuple = ()) -> float:
    """Wall time of one pytest run. ``startup_only`` selects no case (``-m`` matches none):
    the same processes start (xdist workers too), import the SDKs, build the clients and
    collect, but no dialogue runs; that is the start-up subtracted from a real run."""
    url = server.openai_base_url
    marker = "no_such_marker" if startup_only else "age or gender"
    command = [
        sys.executable, "-m", "pytest", "bench.yaml", "-q", "-p", "no:cacheprovider", "-m", marker,
        f"--target=openai:t@{url}", f"--judge=openai:j@{url}", f"--user-model=openai:u@{url}",
        "--socialbias-record=off", "--socialbias-concurrency=400", "-n", str(workers), *extra,
    ]
    env = dict(os.environ, OPENAI_API_KEY="sk-bench")
    started = time.perf_counter()
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    total = time.perf_counter() - started
    if done.returncode not in ((0, 5) if startup_only else (0,)):
        raise SystemExit(done.stdout[-3000:] + done.stderr[-2000:])
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.5)
    args = parser.parse_args()
    bound = TURNS * 2 * args.latency + args.latency
    with tempfile.TemporaryDirectory() as tmp, FakeServer(script, latency=args.latency) as server:
        folder = Path(tmp)
        (folder / "bench.yaml").write_text(
            "socialbias: 1\nsuite: dymt\nprotocol: dymt\n"
            f"seeds: {ROOT / 'suites' / 'dymt' / 'seeds.yaml'}\nstyles: [assessment]\nturns: {TURNS}\n"
        )
        print(f"DyMT, 80 seeds x 1 style x {TURNS} turns, {args.latency * 1000:.0f} ms per call; "
              f"critical-path bound {bound:.1f} s")
        print(f"{'workers':>7}  {'run s':>6}  {'start-up s':>10}  {'dialogues s':>11}  {'x bound':>7}  "
              f"{'CPU s (client)':>14}  {'calls':>6}")
        for workers in (0, 2):
            startup = run(server, folder, workers, startup_only=True)
            server.clear()
            before = os.times()
            total = run(server, folder, workers)
            after = os.times()
            cpu = (after.children_user + after.children_system) - (before.children_user + before.children_system)
            dialogues = total - startup
            print(f"{workers:>7}  {total:>6.2f}  {startup:>10.2f}  {dialogues:>11.2f}  {dialogues / bound:>7.2f}  "
                  f"{cpu:>14.2f}  {server.request_count:>6}")


if __name__ == "__main__":
    main()
