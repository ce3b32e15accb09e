"""Offline testing helpers: a fake OpenAI / Anthropic server on loopback.

Bias suites normally call real model APIs.  To test a suite (or this plugin)
offline, deterministically and fast, point the official SDKs at a
:class:`FakeServer` instead.  It speaks just enough of the OpenAI
chat-completions and Anthropic messages wire formats for ``openai.AsyncOpenAI``
and ``anthropic.AsyncAnthropic``, records every request, and can inject the
faults a real provider produces (rate limits, 5xx, dropped connections,
malformed bodies, timeouts).  Only the standard library is used.

Basic use from a synchronous test::

    import asyncio, openai
    from pytest_socialbias.testing import FakeServer, Reply, Fault, FakeRequest

    def script(req: FakeRequest) -> str | Reply | Fault:
        if "nurse" in req.last_user:
            return Reply("she", finish_reason="stop")
        return "they"

    def test_my_suite() -> None:
        with FakeServer(script=script, latency=0.01) as server:
            async def ask() -> str:
                async with openai.AsyncOpenAI(api_key="sk-test",
                                              base_url=server.openai_base_url) as client:
                    r = await client.chat.completions.create(
                        model="gpt-test", messages=[{"role": "user", "content": "the nurse"}])
                    return r.choices[0].message.content
            assert asyncio.run(ask()) == "she"
            assert server.requests[0].model == "gpt-test"

* ``script=None`` answers ``"echo: <last user message>"``; a ``str`` script
  always answers that string; a callable returns ``str``, :class:`Reply`
  (text, finish reason, usage, latency, logprobs) or :class:`Fault`.
* ``fault_rate``/``fault_kinds``/``seed`` inject reproducible random faults.
* ``server.requests`` is a snapshot of :class:`FakeRequest` records;
  ``server.script_errors`` lists exceptions raised by the script (each one
  was answered with HTTP 500).

Subprocesses (pytest-xdist workers, a CLI under test) only need the URLs:
pass ``server.env`` (``OPENAI_BASE_URL``, ``ANTHROPIC_BASE_URL`` and dummy API
keys) into their environment.  To run a standalone server, e.g. for a whole
``pytest -n 8`` session or a benchmark::

    python -m pytest_socialbias.testing --port 8765 --latency 0.1 \\
        --fault-rate 0.2 --script path/to/script.py:script
"""

from __future__ import annotations

from .behaviours import ReasoningModel
from .server import (
    ENDPOINT_CHECK_TEXT,
    FAULT_KINDS,
    FakeRequest,
    FakeServer,
    Fault,
    Reply,
    Script,
    ScriptResult,
    honoured,
    labels_held_to,
)

__all__ = [
    "ENDPOINT_CHECK_TEXT",
    "FAULT_KINDS",
    "honoured",
    "labels_held_to",
    "ReasoningModel",
    "FakeRequest",
    "FakeServer",
    "Fault",
    "Reply",
    "Script",
    "ScriptResult",
]
