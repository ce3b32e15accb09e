"""Secrets near model calls: where they may not be written, and masking where they show up.

Keys come only from the environment (each provider's ``key_env``) and are never stored
or printed. A spec cannot carry one: a base URL with a password (``http://user:pw@host``)
and a parameter named like a key (``api_key``, ``token``, ``secret``, ``authorization``)
are usage errors whose messages show the spec masked. What a server sends back may still
hold a key (a 401 that echoes it, an answer that quotes a header): ``mask_keys`` replaces
every known key's value in it before it reaches a message, a report or the cache.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

#: What stands where a secret was.
MASK = "***"
#: Words that make a parameter name a secret's (``api_key``, ``x-api-key``, ``apiKey``,
#: ``access_token``, ``client_secret``, ``Authorization``); ``max_tokens`` and
#: ``stop_token_ids`` are no secrets' (plural, or a word among others that name ids).
SECRET_WORDS = frozenset({
    "key", "apikey", "token", "secret", "password", "passwd", "pwd", "authorization", "auth", "bearer",
    "credential", "credentials", "cookie",
})
#: Parameter names that hold such a word but are known not to be secrets.
NOT_SECRETS = frozenset({"stop_token_ids"})
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/@\s?#:]*)(?::(?P<password>[^/@\s?#]*))?@")
#: A secret's value written after its name in a query string or a spec (``api_key=sk-...``).
_SECRET_VALUE = re.compile(r"(?P<name>[A-Za-z0-9_.-]+)=(?P<value>[^&#]*)")


def secret_param(name: str) -> bool:
    """Whether a spec parameter's name says it holds a secret (see SECRET_WORDS)."""
    lowered = name.lower()
    if lowered in NOT_SECRETS:
        return False
    words = re.split(r"[^a-z0-9]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower())
    return lowered in SECRET_WORDS or any(word in SECRET_WORDS for word in words)


def userinfo_of(url: str | None) -> tuple[str, bool] | None:
    """(user, whether a password is given) of a URL that carries userinfo, else None."""
    if not url:
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if "@" not in parts.netloc:
        return None
    return parts.username or "", parts.password is not None


def mask_spec(text: str) -> str:
    """``text`` (a spec, a URL, a message quoting one) with the password of any userinfo
    and the value of any secret-named parameter replaced by MASK."""
    text = _USERINFO.sub(lambda m: m["scheme"] + m["user"] + (f":{MASK}" if m["password"] is not None else "") + "@",
                         text)
    return _SECRET_VALUE.sub(lambda m: f"{m['name']}={MASK}" if secret_param(m["name"]) else m.group(), text)


def mask_keys(text, keys: tuple[str, ...]):
    """``text`` with every key of ``keys`` (providers.known_keys) replaced by MASK;
    anything but a str comes back as it was."""
    if not isinstance(text, str):
        return text
    for key in keys:
        if key in text:
            text = text.replace(key, MASK)
    return text
