"""The HTTP transport under the official SDKs.

Both SDKs default to an httpx connection pool whose request assignment checks every open
connection for expiry on each request: with a few hundred requests in flight (the
concurrency a multi-turn suite needs) that scan dominated the client's CPU (about 5 ms
per call, measured with py-spy). The SDKs' own aiohttp transport (the ``aiohttp`` extra
of openai and anthropic) does the same work in about 1.5-2 ms per call, so it is used
whenever aiohttp is installed (it is a dependency of this package); retries, timeouts
and Retry-After handling stay the SDKs' own.
"""

from __future__ import annotations

import importlib.util


def aiohttp_client(sdk):
    """``sdk.DefaultAioHttpClient()`` when aiohttp is importable, else None (httpx)."""
    if importlib.util.find_spec("aiohttp") is None or not hasattr(sdk, "DefaultAioHttpClient"):
        return None
    return sdk.DefaultAioHttpClient()
