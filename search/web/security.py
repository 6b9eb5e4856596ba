"""What keeps the pages safe: the signed sign-in cookie, CSRF tokens for forms that change state, and the headers
every page is sent with.

- **Sign-in.** With auth on, a person signs in once with an API key (``search.sessions.keys``); the page sets a
  cookie that is signed (itsdangerous, a key derived from the service's cursor secret), ``HttpOnly`` and
  ``SameSite=Strict``. It holds the key's id and a prefix of the stored key hash, never the key: the key is not put
  in a URL, a page or the cookie. Each request re-reads the key's record, so a revoked key signs its pages out.
- **CSRF.** A random ``flysift_csrf`` cookie (``HttpOnly``, ``SameSite=Strict``) and, in each form, its HMAC under
  the same derived key; a POST whose form token does not match, or that a browser marks as cross-site
  (``Sec-Fetch-Site``), is refused before anything changes.
- **Headers.** A Content-Security-Policy without inline scripts or styles (scripts and styles come from
  ``/static/`` only), no framing, no referrer beyond the origin, ``nosniff``.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from itsdangerous import BadSignature, URLSafeTimedSerializer

from search.sessions.keys import ApiKey, Principal

AUTH_COOKIE = "flysift_auth"
CSRF_COOKIE = "flysift_csrf"
CSRF_FIELD = "csrf"
#: a sign-in lasts this long (seconds); a revoked key ends it at once
SIGNIN_MAX_AGE_S = 12 * 3600
#: the prefix of the stored key hash a cookie binds to (the record is re-read on every request)
HASH_PREFIX = 16
_COOKIE_SALT = "flysift-web-signin-v1"
_DERIVE = b"flysift web pages v1"

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def derive_key(service_secret: bytes) -> bytes:
    """The pages' own key, derived from the service's secret (one secret to configure; a different key per use)."""
    return hmac.new(service_secret, _DERIVE, hashlib.sha256).digest()


@dataclass(frozen=True)
class SignedIn:
    """What a valid sign-in cookie names: the key id and the prefix of its stored hash."""

    key_id: str
    hash_prefix: str


class Signer:
    """Signs and checks the sign-in cookie and the CSRF tokens with one derived key."""

    def __init__(self, key: bytes):
        self._key = key
        self._cookies = URLSafeTimedSerializer(key, salt=_COOKIE_SALT)

    def signin_cookie(self, record: ApiKey) -> str:
        return self._cookies.dumps({"k": record.id, "h": record.hash[:HASH_PREFIX]})

    def read_signin(self, value: str | None) -> SignedIn | None:
        """The sign-in a cookie names, or None when it is absent, forged, expired or malformed."""
        if not value or len(value) > 512:
            return None
        try:
            data = self._cookies.loads(value, max_age=SIGNIN_MAX_AGE_S)
        except BadSignature:   # SignatureExpired is a BadSignature
            return None
        if not isinstance(data, dict) or not isinstance(data.get("k"), str) or not isinstance(data.get("h"), str):
            return None
        return SignedIn(data["k"], data["h"])

    def csrf_token(self, csrf_cookie: str) -> str:
        return hmac.new(self._key, b"csrf|" + csrf_cookie.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, csrf_cookie: str | None, token: str | None) -> bool:
        if not csrf_cookie or not token or len(token) > 128 or len(csrf_cookie) > 128:
            return False
        return hmac.compare_digest(self.csrf_token(csrf_cookie), token)


def new_csrf_cookie() -> str:
    return secrets.token_urlsafe(24)


def principal_of(signed: SignedIn, record: ApiKey | None) -> Principal | None:
    """The caller a sign-in stands for, if its key still exists, is not revoked and is the key signed in with."""
    if record is None or record.revoked_at is not None:
        return None
    if not hmac.compare_digest(record.hash[:HASH_PREFIX], signed.hash_prefix):
        return None
    return Principal(team=record.team, scopes=record.scopes, key_id=record.id)


def safe_next(target: str | None) -> str:
    """Where to go after signing in: a path on this site only (no scheme, host or ``//``), else the search page."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target or len(target) > 2000:
        return "/"
    if any(ord(c) < 0x20 for c in target):
        return "/"
    return target
