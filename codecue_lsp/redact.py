"""Keeping secrets out of logs, messages and `codecue.stats`: credentials written into a URL, and the values of the
API key and gateway headers (they come from the environment and must never be echoed back, not even when a server
repeats them in an error body)."""
from __future__ import annotations

import re
from typing import Iterable

# scheme://user:password@host or scheme://token@host: everything between "//" and "@" before the host.
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@\s'\"]+)@")
MASK = "***"
SHORTEST_SECRET = 4  # shorter values ("1", "on") would mask ordinary words; no real key is that short


def has_credentials(url: str) -> bool:
    """The URL holds a user name or password (`https://user:pass@host`)."""
    return _USERINFO.match(url.strip()) is not None


def redact_urls(text: str) -> str:
    """Every URL's credentials in `text` replaced by ***."""
    return _USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)


def scrub(text: str, secrets: Iterable[str | None] = ()) -> str:
    """`text` with URL credentials and each secret value replaced by ***."""
    text = redact_urls(text)
    for secret in sorted((s for s in secrets if s and len(s) >= SHORTEST_SECRET), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text
