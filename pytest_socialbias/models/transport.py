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


def aiohttp_client(sdk, shared: dict | None = None):
    """``sdk.DefaultAioHttpClient()`` when aiohttp is importable, else None (httpx).

    With ``shared`` (one dict per run), every backend of the same SDK gets the same
    client and connection pool: building one costs ~0.25 s, mostly loading the system's
    CA certificates into an SSL context.
    """
    if importlib.util.find_spec("aiohttp") is None or not hasattr(sdk, "DefaultAioHttpClient"):
        return None
    if shared is None:
        return sdk.DefaultAioHttpClient()
    name = sdk.__name__
    if name not in shared:
        shared[name] = sdk.DefaultAioHttpClient()
    return shared[name]
