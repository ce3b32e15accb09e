"""Client-side CPU per model call, SDK included.

The fake server runs in a separate process with no latency, so only the client's CPU is
measured: ``time.process_time()`` of this process around N chat calls through the
plugin's own ``Model.chat`` (cache off, the production path: request key, semaphore,
SDK low-level post on the aiohttp transport, response parsing), C calls in flight. The
first calls (SDK import, client construction, connection set-up) are warm-up and are
not counted. Prints CPU seconds per call for the OpenAI and the Anthropic backends.

    python benchmarks/client_cpu.py [--calls 2000] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def serve(queue) -> None:
    from pytest_socialbias.testing import FakeServer

    def script(req):
        return "People differ as individuals; a generalisation like that is unfair."

    with FakeServer(script) as server:
        queue.put((server.openai_base_url, server.anthropic_base_url))
        while True:
            time.sleep(3600)


async def measure(provider: str, url: str, calls: int, concurrency: int) -> tuple[float, float]:
    from pytest_socialbias.models import CallPool, Model, parse_spec

    pool = CallPool(cache=None, concurrency=concurrency)
    model = Model("target", parse_spec(f"{provider}:m@{url}", "--target"), "--target", pool,
                  defaults={"temperature": 0.7, "max_tokens": 250})

    async def one(i: int) -> None:
        messages = [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": f"Question {i}: what do you think about people in general?"},
        ]
        await model.chat(messages)

    await asyncio.gather(*(one(-i - 1) for i in range(concurrency)))  # warm-up
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(calls)))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    await pool.aclose()
    return cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "sk-bench")
    os.environ.setdefault("ANTHROPIC_API_KEY", "sk-ant-bench")
    queue = multiprocessing.get_context("spawn").Queue()
    server = multiprocessing.get_context("spawn").Process(target=serve, args=(queue,), daemon=True)
    server.start()
    openai_url, anthropic_url = queue.get(timeout=30)
    print(f"{args.calls} calls, {args.concurrency} in flight, fake server in another process, no latency")
    print(f"{'backend':>9}  {'CPU s':>6}  {'wall s':>6}  {'CPU ms/call':>11}  {'calls/s':>7}")
    try:
        for provider, url in (("openai", openai_url), ("anthropic", anthropic_url)):
            cpu, wall = asyncio.run(measure(provider, url, args.calls, args.concurrency))
            print(f"{provider:>9}  {cpu:>6.2f}  {wall:>6.2f}  {1000 * cpu / args.calls:>11.2f}  {args.calls / wall:>7.0f}")
    finally:
        server.terminate()


if __name__ == "__main__":
    main()
