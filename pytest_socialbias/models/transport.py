"""The HTTP transport under the official SDKs.

Both SDKs default to an httpx connection pool (httpx2, its successor, in current
releases; the same pool) whose request assignment checks every open connection for
expiry on each request: with a few hundred requests in flight (the concurrency a
multi-turn suite needs) that scan dominated the client's CPU (about 5 ms
per call, measured with py-spy). The SDKs' own aiohttp transport (the ``aiohttp`` extra
of openai and anthropic) does the same work in about 1.5-2 ms per call, so it is used
whenever aiohttp is installed (it is a dependency of this package); retries, timeouts
and Retry-After handling stay the SDKs' own.

A proxy set for the machine (``http_proxy``, ``HTTPS_PROXY``, ``ALL_PROXY``: common on
corporate CI runners) must never carry a call to this machine's own servers (the ones a
run starts, a local vLLM or llama.cpp, the fake server of the tests): through the proxy
they time out or are refused while the server runs. ``keep_loopback_off_proxies`` adds
the loopback names to ``NO_PROXY``/``no_proxy``, which httpx, httpx2, aiohttp and urllib
all honour, before any client or readiness probe is built.
"""

from __future__ import annotations

import importlib.util
import os

#: Proxy variables, as the HTTP libraries read them (either case).
PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy")
#: This machine's own names; 127.0.0.1 covers the servers the run starts.
LOOPBACK = ("localhost", "127.0.0.1", "::1")


def keep_loopback_off_proxies(environ=None) -> None:
    """Where a proxy variable is set, make sure NO_PROXY and no_proxy name the loopback
    hosts (appended to what they hold; nothing changes without a proxy variable)."""
    environ = os.environ if environ is None else environ
    if not any(environ.get(name) or environ.get(name.upper()) for name in PROXY_VARIABLES):
        return
    held = [part.strip() for name in ("NO_PROXY", "no_proxy") for part in environ.get(name, "").split(",") if part.strip()]
    if "*" in held:
        return
    missing = [host for host in LOOPBACK if host not in held]
    if not missing:
        return
    value = ",".join(dict.fromkeys(held + missing))
    environ["NO_PROXY"] = environ["no_proxy"] = value


def aiohttp_client(sdk, shared: dict | None = None):
    """``sdk.DefaultAioHttpClient()`` when aiohttp is importable, else the SDK's httpx
    pool (``sdk.DefaultAsyncHttpxClient()``), either way following no redirect.

    The SDKs follow redirects by default, to any host: a 307 from the model's server to
    another would send the prompt (and the key, on the same host) there, and file its
    answer under the server's key. A model call takes no redirect: the 3xx is the call's
    error, naming where it pointed (client.py ``_describe``).

    With ``shared`` (one dict per run), every backend of the same SDK gets the same
    client and connection pool: building one costs ~0.25 s, mostly loading the system's
    CA certificates into an SSL context.
    """
    aiohttp = importlib.util.find_spec("aiohttp") is not None and hasattr(sdk, "DefaultAioHttpClient")
    build = sdk.DefaultAioHttpClient if aiohttp else sdk.DefaultAsyncHttpxClient
    if shared is None:
        return build(follow_redirects=False)
    name = sdk.__name__
    if name not in shared:
        shared[name] = build(follow_redirects=False)
    return shared[name]


class EndpointURL:
    """The absolute URL an SDK client posts a path to (``/chat/completions``), as the SDK
    itself builds it, rebuilt only when the client's base URL changes.

    The SDKs merge a relative path with their base URL on every call (parsing and
    copying an httpx URL: about 20 us, 2% of a DyMT call's CPU); given the URL they
    built once, they take it as it is. The same URL goes out either way: it is the
    SDK's own ``_prepare_url`` of the path (the relative path where an SDK lacks it)."""

    def __init__(self, client, path: str):
        self._client, self._path = client, path
        self._base = None
        self._url = path

    def __str__(self) -> str:
        base = self._client.base_url
        if base is not self._base:
            prepare = getattr(self._client, "_prepare_url", None)
            self._url = str(prepare(self._path)) if prepare is not None else self._path
            self._base = base
        return self._url


def redirect_refused(status: int, exc: BaseException) -> str:
    """What a model call that was answered with a redirect says: where it pointed (a
    password in it masked, control characters escaped), and why it was not followed."""
    from .secrets import mask_spec

    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None) or {}
    location = headers.get("location")
    where = f"to {mask_spec(location)[:300]!r}" if location else "(with no Location)"
    return (f"HTTP {status}: the endpoint redirected the call {where}; model calls follow no redirect (the prompt "
            "would go to another server, and its answer be recorded as this one's): give the base URL the "
            "redirect points to, if that is the model's server")
