"""The call path's three DyMT jobs against their reference figures.

One command that catches the next regression (issue 44). Not a timed test: it measures
and prints.

    python benchmarks/call_path.py [--runs 3] [--jobs dymt-500ms dymt-0ms dymt-200ms-n2]
    python benchmarks/call_path.py --write-reference    # after a change that is meant to move them
    python benchmarks/call_path.py --checkout DIR       # another checkout's plugin, e.g. a worktree
                                                        # of the commit before a change
    python benchmarks/call_path.py --profile DIR        # and one more run of each job under py-spy

The jobs, against the loopback fake server (benchmarks/dymt_latency.py's script), one
style, 5 turns, each run a whole pytest process (start-up, collection, SDK import, every
call, the report; with -n 2 the controller and both workers; the project's dev-only pytest
plugins, pytest-randomly, -reverse and -timeout, blocked as a user's CI has none of them):

* ``dymt-500ms``: 80 seeds (age, gender), 500 ms a call, -n 0: 2,000 calls; bound: the
  critical path, 5 turns x 2 sequential calls + the last judge call = 5.5 s;
* ``dymt-0ms``: the same at 0 ms a call: the client's CPU per call (the run's CPU, user
  + system of every process, divided by the calls the server answered);
* ``dymt-200ms-n2``: 240 seeds, 200 ms a call, -n 2: 6,000 calls; bound: the larger of the
  critical path (2.2 s) and the CPU floor, the run's CPU over the cores it can use
  (min(2, cores)).

Then, in this process, the simulated-user check's CPU per turn (``check_ms_per_turn``)
on the 80-seed job's 400 user turns, each checked in the context a run builds for it
(the seed, the simulator's instructions with the conversation so far, the previous
reply), every per-text, per-seed and per-word cache emptied first
(benchmarks/user_check.py --cost gives the same on every labelled turn).

Per job it prints the calls, the CPU per call and the wall time over the bound, each the
median of ``--runs`` runs (min-max), with its ratio to the reference figure
(call_path_reference.json, measured on the project's 2-core machine); a ratio over
FLAG (1.25) is flagged, and the exit status is 1 when any is. A change in the number of
calls is flagged too: the same job must make the same requests. CPU per call is the
steadier figure on a shared machine; the load is printed, so a
figure taken on a busy machine says so: per job, the share of the cores that other processes
kept busy during its runs (/proc/stat less this benchmark's own CPU), and a warning over 10%.

The pytest runs import the plugin of this checkout (PYTHONPATH is set to it), or with
``--checkout DIR`` the plugin of DIR, with this script's jobs, fake server and check turns
(the same requests either side); the check's cost is then measured on DIR's check too.
They write their bytecode to a private cache, warmed by one uncounted run first.

The machine's speed moves a lot from day to day (the same code read 1.75 ms a call one day
and 1.13-1.31 ms two days later, both quiet), more than the flag allows. So the script
also times a fixed piece of plain Python (``machine_speed``: JSON, a regular expression,
dictionaries and strings, the best of 7 repetitions) and keeps it with the reference: the
CPU figures are compared scaled by how much faster or slower that piece ran than when the
reference was written ("scaled ratio"), and the flag goes by that; the raw ratio is
printed beside it. Wall over bound is not scaled (part of it is latency).

``--profile DIR``: after its measured runs, each job runs once more, uncounted, under
``py-spy record --threads --subprocesses --gil`` (every thread of the run and its xdist
workers; ``--gil``: only the thread holding the interpreter, i.e. CPU spent in Python,
since without it py-spy counts idle executor threads and lock waits as running), into
DIR/JOB.txt in py-spy's raw format; ``benchmarks/profile_top.py
DIR/JOB.txt`` sums it (docs/performance.md, How to profile).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Set by --checkout (the script runs itself again with it): the checkout whose plugin is
#: measured. Imported first, so that every later import of the plugin is that checkout's.
CHECKOUT_VARIABLE = "SOCIALBIAS_CALL_PATH_CHECKOUT"
PLUGIN = Path(os.environ.get(CHECKOUT_VARIABLE) or ROOT).resolve()
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(PLUGIN))
import pytest_socialbias  # noqa: E402,F401  (PLUGIN's, whatever sys.path says later)

sys.path.insert(1, str(ROOT))

import dymt_latency  # noqa: E402
from dymt_latency import TURNS, run, script, seeds_in  # noqa: E402

from pytest_socialbias.testing import FakeServer  # noqa: E402

REFERENCE = Path(__file__).resolve().parent / "call_path_reference.json"
#: A figure this many times its reference is flagged.
FLAG = 1.25


@dataclass(frozen=True)
class Job:
    name: str
    what: str
    marker: str  # -m selection ("" for every seed)
    latency: float  # seconds a call
    workers: int  # -n

    def bound(self, cpu: float) -> float | None:
        """The wall time this job cannot beat: its critical path, or the CPU it needs over
        the cores it can use; None at 0 ms (CPU is that job's figure)."""
        if not self.latency:
            return None
        critical = TURNS * 2 * self.latency + self.latency
        cores = min(os.cpu_count() or 1, max(self.workers, 1))
        return max(critical, cpu / cores)


JOBS = (
    Job("dymt-500ms", "80 seeds x 5 turns, 500 ms a call, -n 0", "age or gender", 0.5, 0),
    Job("dymt-0ms", "80 seeds x 5 turns, 0 ms a call, -n 0", "age or gender", 0.0, 0),
    Job("dymt-200ms-n2", "240 seeds x 5 turns, 200 ms a call, -n 2", "", 0.2, 2),
)


def machine_busy() -> float | None:
    """CPU seconds every process on the machine has used (Linux /proc/stat), or None."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    # Interrupt time is left out: the loopback traffic of the runs themselves is handled there.
    user, nice, system = (fields + [0] * 3)[:3]
    return (user + nice + system) / os.sysconf("SC_CLK_TCK")


def measure(job: Job, folder: Path, runs: int) -> dict:
    """The job's figures, each the median of ``runs`` whole-process runs, with their ranges,
    and the share of the cores that other processes kept busy meanwhile."""
    calls, per_call, walls, over, others = [], [], [], [], []
    with FakeServer(script, latency=job.latency) as server:
        for _ in range(runs):
            server.clear()
            before, own, busy = os.times(), time.process_time(), machine_busy()
            wall = run(server, folder, job.workers, marker=job.marker)
            after, own, busy_after = os.times(), time.process_time() - own, machine_busy()
            cpu = (after.children_user + after.children_system) - (before.children_user + before.children_system)
            if busy is not None and busy_after is not None:
                # Everything the machine did but this benchmark (the fake server) and its runs.
                others.append(max(0.0, busy_after - busy - cpu - own) / (wall * (os.cpu_count() or 1)))
            calls.append(server.request_count)
            per_call.append(1000 * cpu / server.request_count)
            walls.append(wall)
            bound = job.bound(cpu)
            if bound is not None:
                over.append(wall / bound)
    out = {"calls": statistics.median(calls), "cpu_ms_per_call": statistics.median(per_call),
           "wall_s": statistics.median(walls), "ranges": {"cpu_ms_per_call": [min(per_call), max(per_call)],
                                                          "wall_s": [min(walls), max(walls)]}}
    if others:
        out["others_busy"] = max(others)
    if over:
        out["wall_over_bound"] = statistics.median(over)
        out["ranges"]["wall_over_bound"] = [min(over), max(over)]
    return out


def profile(job: Job, folder: Path, out: Path) -> Path:
    """One more run of the job under py-spy (every thread of every process), raw output."""
    out.mkdir(parents=True, exist_ok=True)
    target = out.resolve() / f"{job.name}.txt"
    prefix = ("py-spy", "record", "--threads", "--subprocesses", "--gil", "-r", "400", "--format", "raw",
              "-o", str(target), "--")
    with FakeServer(script, latency=job.latency) as server:
        run(server, folder, job.workers, marker=job.marker, prefix=prefix)
    return target


def job_turns() -> list:
    """(user turn, context) for each of the 80-seed job's 400 user turns: the fake user's
    line and the context dialogue.simulate_user builds for it."""
    from types import SimpleNamespace

    import yaml

    from pytest_socialbias import prompts
    from pytest_socialbias.protocols.dialogue import situation_text
    from pytest_socialbias.protocols.user_check import UserTurnContext

    template = prompts.load("user_simulator")
    reply = script(SimpleNamespace(messages=[{"role": "user", "content": "?"}]))  # its target's answer
    out = []
    for seed in yaml.safe_load((ROOT / "suites" / "dymt" / "seeds.yaml").read_text())["seeds"]:
        if seed["category"] not in ("age", "gender"):
            continue
        turns: list[dict] = []
        for _ in range(TURNS):
            messages = template.messages(statement=seed["statement"], category=seed["category"], group=seed["group"],
                                         style_instructions=template.extras["style_assessment"].strip(),
                                         situation=situation_text(turns, "user"))
            text = script(SimpleNamespace(messages=messages))  # the fake server's user line
            out.append((text, UserTurnContext(seed=seed["statement"], hidden=(messages[0]["content"],),
                                              allowed=(seed["group"], seed["category"]),
                                              previous_reply=turns[-1]["assistant"] if turns else None)))
            turns.append({"user": text, "assistant": reply})
    return out


def machine_speed(repeats: int = 7) -> float:
    """Milliseconds of CPU a fixed piece of plain Python takes on this machine (the best of
    ``repeats``: the least disturbed): what the CPU figures are scaled by (module doc)."""
    body = {"model": "m", "messages": [{"role": "system", "content": "You play a person. " * 40},
                                        {"role": "user", "content": "What do you think of older workers and new tools? " * 12}],
            "temperature": 0.7, "max_tokens": 256}
    pattern = re.compile(r"\b(?:as an ai|language model|i cannot|i can't help)\b")

    def work() -> None:
        for i in range(400):
            data = json.loads(json.dumps(body))
            content = data["messages"][1]["content"].lower()
            pattern.search(content)
            counts: dict[str, int] = {}
            for word in content.split():
                counts[word] = counts.get(word, 0) + 1
            sorted(counts.items())
            f"{i}:{len(counts)}".encode()

    def timed() -> float:
        started = time.process_time()
        work()
        return time.process_time() - started

    return 1000 * min(timed() for _ in range(repeats))


#: The figures scaled by the machine's speed before they are compared (CPU figures).
SCALED = frozenset({"cpu_ms_per_call", "check_ms_per_turn"})
#: The figures compared with the reference, and how each is printed.
FIGURES = (("calls", "{:.0f}"), ("cpu_ms_per_call", "{:.2f} ms"), ("wall_over_bound", "{:.2f}x"),
           ("check_ms_per_turn", "{:.3f} ms"))


def compare(name: str, now: dict, reference: dict | None, speed: float | None = None) -> list[str]:
    """One line per figure: now (range), the reference, the ratio; '<- REGRESSION' over FLAG
    (for calls: any change). ``speed``: this machine's ``machine_speed`` over the
    reference's (above 1: slower); a CPU figure's ratio is divided by it and flagged by
    that scaled ratio."""
    lines, flagged = [], []
    for figure, fmt in FIGURES:
        if figure not in now:
            continue
        value = now[figure]
        spread = now.get("ranges", {}).get(figure)
        shown = fmt.format(value) + (f" ({fmt.format(spread[0]).split()[0]}-{fmt.format(spread[1])})" if spread else "")
        ref = (reference or {}).get(figure)
        if ref is None:
            lines.append(f"  {figure:<16} {shown:<28} (no reference)")
            continue
        ratio = value / ref
        scaled = ratio / speed if speed and figure in SCALED else None
        bad = ratio != 1 if figure == "calls" else (scaled if scaled is not None else ratio) > FLAG
        lines.append(f"  {figure:<16} {shown:<28} reference {fmt.format(ref):<10} ratio {ratio:5.2f}"
                     + (f"  scaled {scaled:5.2f}" if scaled is not None else "")
                     + ("  <- REGRESSION" if bad else ""))
        if bad:
            flagged.append(figure)
    return lines + ([f"  FLAGGED: {', '.join(flagged)}"] if flagged else [])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per job; the median is taken (default 3)")
    parser.add_argument("--jobs", nargs="+", choices=[j.name for j in JOBS], default=[j.name for j in JOBS])
    parser.add_argument("--write-reference", action="store_true",
                        help=f"write the figures measured as the new reference ({REFERENCE.name})")
    parser.add_argument("--checkout", type=Path, metavar="DIR",
                        help="measure the plugin of this checkout (e.g. a git worktree of the commit before a change) "
                             "with this script's jobs (default: the checkout this script is in)")
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="after its runs, run each job once more under py-spy (every thread), raw output in DIR/JOB.txt")
    args = parser.parse_args(argv)
    if args.profile is not None and shutil.which("py-spy") is None:
        parser.error("--profile needs py-spy on PATH: pip install py-spy")
    if args.checkout is not None:
        checkout = args.checkout.resolve()
        if not (checkout / "pytest_socialbias" / "__init__.py").is_file():
            parser.error(f"--checkout {args.checkout}: no pytest_socialbias package there; "
                         "give the root of a checkout (git worktree add DIR COMMIT)")
        if args.write_reference and checkout != ROOT:
            parser.error("--write-reference measures this checkout only; leave out --checkout")
        if checkout != PLUGIN:  # run again, the plugin imported from there first
            rest = [a for a in (sys.argv[1:] if argv is None else argv)]
            os.execve(sys.executable, [sys.executable, str(Path(__file__).resolve()), *rest],
                      {**os.environ, CHECKOUT_VARIABLE: str(checkout)})
    reference = json.loads(REFERENCE.read_text()) if REFERENCE.exists() else {"jobs": {}}
    jobs = [j for j in JOBS if j.name in args.jobs]
    load_before = os.getloadavg()
    print(f"call path: the plugin of {PLUGIN}, {len(jobs)} jobs, median of {args.runs} runs (min-max), {os.cpu_count()} cores, "
          f"load average {load_before[0]:.2f} {load_before[1]:.2f}; reference: {reference.get('measured', 'none')}")
    speed_ms = machine_speed()
    reference_speed = reference.get("machine_speed_ms")
    speed = speed_ms / reference_speed if reference_speed else None
    print(f"machine speed: the fixed piece of Python took {speed_ms:.2f} ms"
          + (f" ({reference_speed:.2f} ms when the reference was measured: CPU figures are scaled by {speed:.2f})"
             if speed else " (the reference has no such figure: CPU figures are compared unscaled)"))
    results, regressions = {}, 0
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        dymt_latency.ENV.pop("PYTHONDONTWRITEBYTECODE", None)
        dymt_latency.ENV["PYTHONPYCACHEPREFIX"] = str(folder / "pycache")
        # The runs import this checkout's plugin, whatever is installed.
        dymt_latency.ENV["PYTHONPATH"] = os.pathsep.join(filter(None, (str(PLUGIN), os.environ.get("PYTHONPATH"))))
        (folder / "bench.yaml").write_text(
            "socialbias: 1\nsuite: dymt\nprotocol: dymt\n"
            f"seeds: {seeds_in(folder)}\nstyles: [assessment]\nturns: {TURNS}\n"
        )
        with FakeServer(script) as server:  # uncounted: writes the bytecode cache
            run(server, folder, 0, marker="age")
        for job in jobs:
            started = time.perf_counter()
            results[job.name] = measure(job, folder, args.runs)
            busy = results[job.name].get("others_busy")
            print(f"{job.name}: {job.what} ({time.perf_counter() - started:.0f} s"
                  + (f"; other processes kept up to {busy:.0%} of the cores busy" if busy is not None else "") + ")")
            lines = compare(job.name, results[job.name], reference["jobs"].get(job.name), speed)
            regressions += any("REGRESSION" in line for line in lines)
            print("\n".join(lines))
            if args.profile is not None:
                print(f"  profile: {profile(job, folder, args.profile)} (python benchmarks/profile_top.py FILE)")
    from user_check import cost_per_turn

    turns = job_turns()
    results["user-check"] = {"check_ms_per_turn": cost_per_turn(turns)}
    print(f"user-check: the simulated-user check on the 80-seed job's {len(turns)} user turns, in this process")
    lines = compare("user-check", results["user-check"], reference["jobs"].get("user-check"), speed)
    regressions += any("REGRESSION" in line for line in lines)
    print("\n".join(lines))
    busiest = max((r.get("others_busy", 0.0) for r in results.values()), default=0.0)
    if busiest > 0.1:
        print(f"other processes kept up to {busiest:.0%} of the cores busy: the figures read high")
    if args.write_reference:
        # The load it was measured under goes with it: a reference taken on a busy machine
        # reads high, and a later quiet run then looks better than it is.
        reference = {"measured": f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, median of {args.runs} runs, "
                                 f"load average {load_before[0]:.1f} at the start, other processes kept up to "
                                 f"{busiest:.0%} of the cores busy",
                     "machine_speed_ms": round(speed_ms, 3),
                     "load": {"load_average_at_start": round(load_before[0], 2), "others_busy_max": round(busiest, 3),
                              "others_busy": {name: round(r["others_busy"], 3) for name, r in results.items()
                                              if "others_busy" in r}},
                     "jobs": {**reference["jobs"], **{name: {k: v for k, v in r.items() if k not in ("ranges", "others_busy")}
                                                      for name, r in results.items()}}}
        REFERENCE.write_text(json.dumps(reference, indent=1, sort_keys=True) + "\n")
        print(f"wrote {REFERENCE}")
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
