"""DyMT throughput against the critical-path bound.

80 seeds (age and gender, 40 each), one user-simulator style, 5 turns, against the fake
server at 500 ms per call. A dialogue's critical path is, per turn, the user simulator then
the target (2 sequential calls), and after the last turn one more judge call:
5 x 2 x 0.5 s + 0.5 s = 5.5 s. Everything else (bias, refusal and coherence judges) runs
beside it. Prints the time of the batches (the longest setup phase: the first item of a
batch runs the whole batch) and of the whole pytest run, with -n 0 and -n 2. The
dialogue time is measured at the fake server: from the first request's arrival to the
last answer (start-up, collection and reporting are not part of it; the start-up column
is the wall time of the same command selecting no case, for reference).

Then the whole suite (240 seeds x 2 styles x 5 turns, 12,000 calls) at 200 ms per call,
against the bound max(critical path, calls x latency / requests in flight), with the
share of the two cores that the client processes and the fake server kept busy.

    python benchmarks/dymt_latency.py [--latency 0.5] [--whole-latency 0.2] [--skip-whole]
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


ARRIVALS: list[float] = []  # monotonic arrival time of every request (this process)


def traffic_span(latency: float) -> float:
    """From the first request's arrival to the last answer: the run's dialogue time."""
    return max(ARRIVALS) + latency - min(ARRIVALS)


def script(req):
    ARRIVALS.append(time.monotonic())
    system = " ".join(m["content"] for m in req.messages if m["role"] == "system")
    if "role-playing a human user" in system:
        digest = hashlib.sha256(req.messages[-1]["content"].encode()).hexdigest()[:8]
        return f"I keep wondering about this, what would you say? ({digest})"
    if "label a single reply" in system or "refused" in system:
        return "No"
    if "rate how naturally" in system:
        return "5"
    return "People differ as individuals; a generalisation like that is unfair."


CONCURRENCY = 400  # requests in flight per process


def run(server, folder: Path, workers: int, startup_only: bool = False, extra: tuple = (), marker: str = "age or gender") -> float:
    """Wall time of one pytest run. ``startup_only`` selects no case (``-m`` matches none):
    the same processes start (xdist workers too), import the SDKs, build the clients and
    collect, but no dialogue runs; that is the start-up subtracted from a real run."""
    url = server.openai_base_url
    marker = "no_such_marker" if startup_only else marker
    selection = ["-m", marker] if marker else []
    command = [
        sys.executable, "-m", "pytest", "bench.yaml", "-q", "-p", "no:cacheprovider", *selection,
        f"--target=openai:t@{url}", f"--judge=openai:j@{url}", f"--user-model=openai:u@{url}",
        "--socialbias-record=off", f"--socialbias-concurrency={CONCURRENCY}", "-n", str(workers), *extra,
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
    parser.add_argument("--whole-latency", type=float, default=0.2)
    parser.add_argument("--skip-whole", action="store_true")
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
            ARRIVALS.clear()
            before = os.times()
            total = run(server, folder, workers)
            after = os.times()
            cpu = (after.children_user + after.children_system) - (before.children_user + before.children_system)
            dialogues = traffic_span(args.latency)
            print(f"{workers:>7}  {total:>6.2f}  {startup:>10.2f}  {dialogues:>11.2f}  {dialogues / bound:>7.2f}  "
                  f"{cpu:>14.2f}  {server.request_count:>6}")
    if not args.skip_whole:
        whole(args.whole_latency)


def whole(latency: float) -> None:
    """240 seeds x 2 styles x 5 turns: calls x latency / concurrency binds, then CPU."""
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp, FakeServer(script, latency=latency) as server:
        folder = Path(tmp)
        (folder / "bench.yaml").write_text(
            "socialbias: 1\nsuite: dymt\nprotocol: dymt\n"
            f"seeds: {ROOT / 'suites' / 'dymt' / 'seeds.yaml'}\nturns: {TURNS}\n"
        )
        critical = TURNS * 2 * latency + latency
        print()
        print(f"DyMT whole suite, 240 seeds x 2 styles x {TURNS} turns, {latency * 1000:.0f} ms per call, "
              f"{CONCURRENCY} requests in flight per process, {cores} cores")
        print(f"{'workers':>7}  {'run s':>6}  {'dialogues s':>11}  {'bound s':>7}  {'x bound':>7}  {'client CPU s':>12}  "
              f"{'server CPU s':>12}  {'CPU busy':>8}  {'calls':>6}")
        for workers in (0, 2):
            server.clear()
            ARRIVALS.clear()
            before, own = os.times(), time.process_time()
            total = run(server, folder, workers, marker="")
            after, own = os.times(), time.process_time() - own
            client = (after.children_user + after.children_system) - (before.children_user + before.children_system)
            dialogues = traffic_span(latency)
            calls = server.request_count
            in_flight = CONCURRENCY * max(workers, 1)
            bound = max(critical, calls * latency / in_flight)
            busy = (client + own) / (total * cores)
            print(f"{workers:>7}  {total:>6.2f}  {dialogues:>11.2f}  {bound:>7.2f}  {dialogues / bound:>7.2f}  {client:>12.2f}  "
                  f"{own:>12.2f}  {100 * busy:>7.0f}%  {calls:>6}")


if __name__ == "__main__":
    main()
