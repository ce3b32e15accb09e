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

Last, the whole-process client CPU per call (issue 18): the 80-seed job at 0 ms per call,
the fake server in this process and the pytest run in another, the run's CPU (user +
system of pytest and its xdist workers: imports, collection, SDK loading, every call,
the report) divided by the calls the server answered; beside it the transport's own CPU
per call, measured the same minute by benchmarks/client_cpu.py's loop (the plugin's
Model.chat over the SDK, nothing else). Target: the whole process within 2x of the
transport. Bytecode is cached (a private PYTHONPYCACHEPREFIX), as on any machine that
can write it.

    python benchmarks/dymt_latency.py [--latency 0.5] [--whole-latency 0.2] [--skip-whole]
                                      [--only-cpu] [--cpu-runs 3]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
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
        # Worded so that the simulated-user check passes it for every seed: "what would
        # you say?" asks for agreement, a claim when the seed has the word "say" (age-023).
        return f"I keep wondering about this. What do you make of it? ({digest})"
    if "label a single reply" in system or "refused" in system:
        return "No"
    if "rate how naturally" in system:
        return "5"
    return "People differ as individuals; a generalisation like that is unfair."


def seeds_in(folder: Path) -> Path:
    """The DyMT seeds copied into the run's folder: a suite's files must lie inside the
    project (pytest's rootdir, here the folder)."""
    copy = folder / "seeds.yaml"
    if not copy.exists():
        shutil.copyfile(ROOT / "suites" / "dymt" / "seeds.yaml", copy)
    return copy


CONCURRENCY = 400  # requests in flight per process
#: The project's dev-only pytest plugins (installed by the ``dev`` extra, not by users) stay
#: out of the measured runs: pytest-randomly alone costs about 0.1 s of CPU a process to import.
DEV_PLUGINS_OFF = ("-p", "no:randomly", "-p", "no:reverse", "-p", "no:timeout")
ENV = dict(os.environ)  # the pytest runs' environment (main() sets the bytecode cache)
CPU_TARGET = 2.0  # whole-process CPU per call, as a multiple of the transport's


def run(server, folder: Path, workers: int, startup_only: bool = False, extra: tuple = (), marker: str = "age or gender",
        prefix: tuple = ()) -> float:
    """Wall time of one pytest run. ``startup_only`` selects no case (``-m`` matches none):
    the same processes start (xdist workers too), import the SDKs, build the clients and
    collect, but no dialogue runs; that is the start-up subtracted from a real run.
    ``prefix``: a command the run is started under (a profiler)."""
    url = server.openai_base_url
    marker = "no_such_marker" if startup_only else marker
    # Part of the suite selected: allowed, or the run fails as PARTIAL (it decides no release).
    selection = ["-m", marker, "--socialbias-allow-partial"] if marker else []
    command = [
        *prefix, sys.executable, "-m", "pytest", "bench.yaml", "-q", "-p", "no:cacheprovider", *DEV_PLUGINS_OFF, *selection,
        f"--target=openai:t@{url}", f"--judge=openai:j@{url}", f"--user-model=openai:u@{url}",
        "--socialbias-record=off", f"--socialbias-concurrency={CONCURRENCY}", "-n", str(workers), *extra,
    ]
    env = dict(ENV, OPENAI_API_KEY="sk-bench")
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
    parser.add_argument("--only-cpu", action="store_true", help="only the whole-process CPU per call")
    parser.add_argument("--cpu-runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as pycache:
        ENV.pop("PYTHONDONTWRITEBYTECODE", None)
        ENV["PYTHONPYCACHEPREFIX"] = pycache
        warm_bytecode()
        if not args.only_cpu:
            latency_table(args)
            if not args.skip_whole:
                whole(args.whole_latency)
        cpu_per_call(args.cpu_runs)


def warm_bytecode() -> None:
    """One uncounted run: compiles and caches every module a run imports (SDKs included)."""
    with tempfile.TemporaryDirectory() as tmp, FakeServer(script) as server:
        folder = Path(tmp)
        (folder / "bench.yaml").write_text(
            "socialbias: 1\nsuite: dymt\nprotocol: dymt\n"
            f"seeds: {seeds_in(folder)}\nstyles: [assessment]\nturns: 1\n"
        )
        run(server, folder, 0, marker="age")


def latency_table(args) -> None:
    bound = TURNS * 2 * args.latency + args.latency
    with tempfile.TemporaryDirectory() as tmp, FakeServer(script, latency=args.latency) as server:
        folder = Path(tmp)
        (folder / "bench.yaml").write_text(
            "socialbias: 1\nsuite: dymt\nprotocol: dymt\n"
            f"seeds: {seeds_in(folder)}\nstyles: [assessment]\nturns: {TURNS}\n"
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


def whole(latency: float) -> None:
    """240 seeds x 2 styles x 5 turns: calls x latency / concurrency binds, then CPU."""
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp, FakeServer(script, latency=latency) as server:
        folder = Path(tmp)
        (folder / "bench.yaml").write_text(
            "socialbias: 1\nsuite: dymt\nprotocol: dymt\n"
            f"seeds: {seeds_in(folder)}\nturns: {TURNS}\n"
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


def transport_cpu_per_call(calls: int = 2000) -> float:
    """benchmarks/client_cpu.py's figure for the OpenAI backend, in a fresh process (ms)."""
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "client_cpu.py"), "--calls", str(calls)],
                          capture_output=True, text=True, env=ENV)
    for line in done.stdout.splitlines():
        fields = line.split()
        if fields and fields[0] == "openai":
            return float(fields[3])
    raise SystemExit(f"client_cpu.py printed no openai row:\n{done.stdout}{done.stderr[-2000:]}")


def cpu_per_call(runs: int) -> None:
    """Whole-process client CPU per call on the 80-seed job at 0 ms, against the transport's."""
    print()
    print(f"Whole-process client CPU per call: DyMT 80 seeds x 1 style x {TURNS} turns, 0 ms per call, "
          f"median of {runs} runs (min-max); transport = client_cpu.py, measured between them")
    print(f"{'workers':>7}  {'run s':>6}  {'client CPU s':>12}  {'calls':>6}  {'CPU ms/call':>16}  "
          f"{'transport ms':>16}  {'ratio':>5}  target")
    with tempfile.TemporaryDirectory() as tmp, FakeServer(script, latency=0.0) as server:
        folder = Path(tmp)
        (folder / "bench.yaml").write_text(
            "socialbias: 1\nsuite: dymt\nprotocol: dymt\n"
            f"seeds: {seeds_in(folder)}\nstyles: [assessment]\nturns: {TURNS}\n"
        )
        for workers in (0, 2):
            per_call, walls, transport, calls = [], [], [], 0
            for _ in range(runs):
                server.clear()
                before = os.times()
                walls.append(run(server, folder, workers))
                after = os.times()
                cpu = (after.children_user + after.children_system) - (before.children_user + before.children_system)
                calls = server.request_count
                per_call.append(1000 * cpu / calls)
                transport.append(transport_cpu_per_call())
            mine, theirs = statistics.median(per_call), statistics.median(transport)
            ratio = mine / theirs
            print(f"{workers:>7}  {statistics.median(walls):>6.2f}  {mine * calls / 1000:>12.2f}  {calls:>6}  "
                  f"{mine:>5.2f} ({min(per_call):.2f}-{max(per_call):.2f})  "
                  f"{theirs:>5.2f} ({min(transport):.2f}-{max(transport):.2f})  {ratio:>5.2f}  "
                  f"<= {CPU_TARGET:.0f}x: {'met' if ratio <= CPU_TARGET else 'not met'}")


if __name__ == "__main__":
    main()
