"""Replaying a large recorded run from the cache (``--socialbias-record=none``).

2,400 DyMT dialogues x 10 turns (1,200 synthetic seeds x 2 user-simulator styles; about
120,000 model calls). The cache is filled first, in-process, by the plugin's own protocol
code and Model.chat with an instant scripted backend instead of HTTP (filling through a
fake server would take minutes and measure nothing new). Then the real command replays it
with no server at all, and we print its wall time and the peak RSS of the pytest process,
against the targets (20 s, 500 MB on 2 cores).

    python benchmarks/replay.py [--seeds 1200] [--turns 10] [--keep DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from dymt_latency import script  # noqa: E402

from pytest_socialbias.cases import SuiteOverrides  # noqa: E402
from pytest_socialbias.models.base import ChatResponse  # noqa: E402
from pytest_socialbias.modelset import ModelSet  # noqa: E402
from pytest_socialbias.options import Settings  # noqa: E402
from pytest_socialbias.protocols import load_suite  # noqa: E402
from pytest_socialbias.vocabulary import CATEGORIES  # noqa: E402
from pytest_socialbias.worker import run_case  # noqa: E402

URL = "http://127.0.0.1:9/v1"  # never contacted: the replay is cache-only


class InstantBackend:
    base_url = URL

    async def complete(self, messages, params, top_logprobs, **_):
        text = script(SimpleNamespace(messages=messages))
        return ChatResponse(text=text, prompt_tokens=1, completion_tokens=1, model="bench")

    async def aclose(self):
        return None


def write_suite(folder: Path, seeds: int, turns: int) -> Path:
    lines = ["# Synthetic seeds for the replay benchmark (not real stereotypes).", "seeds:"]
    for i in range(seeds):
        category = CATEGORIES[i % len(CATEGORIES)]
        lines += [f"  - id: {category}-{i:05d}", f"    category: {category}", "    group: group",
                  f"    statement: Synthetic benchmark statement number {i}."]
    (folder / "seeds.yaml").write_text("\n".join(lines) + "\n")
    suite = folder / "bench.yaml"
    suite.write_text(f"socialbias: 1\nsuite: replay\nprotocol: dymt\nseeds: seeds.yaml\nturns: {turns}\nbatch_size: 400\n")
    return suite


def fill(folder: Path, suite: Path, turns: int) -> int:
    settings = Settings(
        target=f"openai:t@{URL}", judges=(f"openai:j@{URL}",), user=f"openai:u@{URL}",
        record="new", cache_dir=folder / ".socialbias", concurrency=10_000,
    )
    models = ModelSet(settings)
    models.pool.backend_for = lambda spec, option: InstantBackend()
    roles = models.roles()
    cases = load_suite(suite, SuiteOverrides(turns=turns)).cases

    async def all_cases():
        records = await asyncio.gather(*(run_case(case, roles) for case in cases))
        return sum(sum(u["calls"] for u in r["usage"].values()) for r in records)

    calls = models.run(all_cases())
    models.close()
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1200)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--keep", type=Path, help="keep the filled cache in this folder (reused if there)")
    args = parser.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "sk-bench")
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        suite = write_suite(folder, args.seeds, args.turns)
        if not (folder / ".socialbias").exists():
            started = time.perf_counter()
            calls = fill(folder, suite, args.turns)
            print(f"filled the cache: {calls} calls in {time.perf_counter() - started:.1f} s "
                  f"({(folder / '.socialbias' / 'calls.sqlite3').stat().st_size / 1e6:.0f} MB)")
        command = [
            sys.executable, "-m", "pytest", "bench.yaml", "-q", "-p", "no:cacheprovider",
            f"--target=openai:t@{URL}", f"--judge=openai:j@{URL}", f"--user-model=openai:u@{URL}",
            "--socialbias-record=none", "--socialbias-report=replay.json",
        ]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True)
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode not in (0, 1):  # 1: a gate may fail on synthetic data
            raise SystemExit(done.stdout[-3000:] + done.stderr[-2000:])
        summary = [line for line in done.stdout.splitlines() if " cases: " in line]
        cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        print(f"replay of {args.seeds * 2} dialogues x {args.turns} turns: {summary[0] if summary else '?'}")
        print(f"wall {wall:.1f} s (target < 20 s), CPU {cpu:.1f} s, peak RSS {after.ru_maxrss / 1024:.0f} MB (target < 500 MB)")


if __name__ == "__main__":
    main()
