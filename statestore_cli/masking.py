"""The one masking function every message goes through: no password in any message.

``mask_text`` replaces with ``***``, in any text (a URL, a driver's or a backend's error, a command's
output, a whole error line):

- every value registered with ``register_secret`` (what a ``_cmd`` or a ``_secret`` gave, the password of a
  filesystem backend's root URL), in its plain and its URL-quoted forms, wherever it appears;
- the password in a URL's userinfo (``scheme://user:PASSWORD@host``), of any scheme, parsed or not (and
  of a value meant as a URL that lacks its scheme, ``user:PASSWORD@host``, with ``url=True``);
- the value of a password-like parameter (``password``, ``sslpassword``, ``passwd``, ``pwd``, ``secret``,
  ``token``, ``api_key``/``apikey``, ``access_key``, ``credential(s)``, ``auth``, any case, also as part of a
  longer name such as ``client_secret``) after ``?``, ``&``, ``;`` or a space: a URL's query, parsed or not, or
  a libpq-style ``key=value`` string.

It over-masks rather than leaks: a password with an unquoted ``@`` hides up to the last ``@`` of the word.
The registry is per process: a value read once stays masked in every later message of that process.
Free of imports beyond the standard library's ``re`` (``urllib.parse`` only when a value is registered): the
fast ``get`` path uses it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache

MASK = "***"

# A registered value shorter than this is not masked as free text: "ab" would mask every "ab" in a message.
# A password that short is still masked wherever it sits in a URL (by its place, not its text).
MIN_SECRET = 4

_registered: set[str] = set()

_SECRET_WORDS = r"password|passwd|pwd|secret|token|api_?key|access_?key|credentials?|auth"


@cache  # compiled on the first message, not at start-up: a `get` that succeeds masks nothing
def _patterns() -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    """The userinfo pattern (in text), the one of a URL value without a scheme, and the parameter pattern."""
    # scheme://user:PASSWORD@ - the password runs to the last "@" of the word (it may hold an unquoted "@").
    userinfo = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^:/@\s]*:)\S*@")
    # user:PASSWORD@ at the start of a value meant as a URL that lacks its scheme; in other text such a word
    # is more often data ("email:bob@example.com", a key) than a URL.
    bare = re.compile(r"^(\s*[^:/@\s]*:)(?!//)\S*@")
    # name=VALUE where the name holds a secret word; the value ends at &, #, ;, whitespace, or a closing quote.
    parameter = re.compile(
        rf"((?:^|[?&;\s])[\w.-]*(?:{_SECRET_WORDS})[\w.-]*=)[^&#;\s]*?(?=['\"]?(?:[&#;\s]|$))",
        re.IGNORECASE,
    )
    return userinfo, bare, parameter


_URL_VALUE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S*\Z")  # a whole value that is one URL (not JSON holding one)
_MASKS = (MASK, "<password>")  # a value already masked stays as it is (a message is masked more than once)


def register_secret(value: str | None) -> None:
    """Mask ``value`` in every later message of this process, as written and URL-quoted.

    A value that is a URL registers its password and its password-like parameters' values, not the whole
    URL: where the URL is shown it is shown masked, and its host and database still say which store failed.
    """
    if not value:
        return
    from urllib.parse import quote, quote_plus, unquote  # only when a value is read: the fast `get` needs none

    text = value.strip()
    parts = _url_secrets(text) if _URL_VALUE.match(text) else [text]
    for part in parts:
        for form in {part, unquote(part), quote(unquote(part), safe=""), quote_plus(unquote(part))}:
            if len(form) >= MIN_SECRET:
                _registered.add(form)


def register_url_password(url: str) -> None:
    """Register the secrets of a URL (its password, its password-like parameters) for masking; a value
    that is not one URL registers nothing (it is no secret: a local path, say)."""
    if _URL_VALUE.match(url.strip()):
        register_secret(url)


def register_named_secrets(values: Mapping[str, object]) -> None:
    """Register each string in ``values`` whose name is password-like (``token``, ``secret_id``...): the
    keyword arguments of a secrets backend, which its own errors may quote."""
    for name, value in values.items():
        if isinstance(value, str) and re.search(_SECRET_WORDS, name, re.IGNORECASE):
            register_secret(value)


def forget_secrets() -> None:
    """Forget every registered value: for a caller that loads another configuration in the same process
    (the tests run many commands in one), so that masking follows the one in use."""
    _registered.clear()


def _url_secrets(url: str) -> list[str]:
    """The password and the password-like parameters' values of ``url``, even when it does not parse."""
    from urllib.parse import urlsplit

    found = []
    userinfo = _patterns()[0].search(url) or _patterns()[1].search(url)
    if userinfo:
        found.append(url[userinfo.end(1) : userinfo.end() - 1])
    try:
        query = urlsplit(url).query
    except ValueError:  # an invalid port or IPv6 host: the parameters are still read by their shape below
        query = url.partition("?")[2]
    for pair in re.split(r"[&;]", query):
        name, _, val = pair.partition("=")
        if val and re.search(_SECRET_WORDS, name, re.IGNORECASE):
            found.append(val)
    return found


def mask_text(text: str, mask: str = MASK, *, url: bool = False) -> str:
    """``text`` with every registered secret, URL password and password-like parameter as ``mask``
    (``***``; the ``db init`` a message suggests writes ``<password>``, for the reader to fill in).
    ``url``: ``text`` is a value meant as a URL, so ``user:PASSWORD@host`` without a scheme is masked too."""
    for secret in sorted(_registered, key=len, reverse=True):  # longest first: a quoted form holds the plain one
        if secret in text:
            text = text.replace(secret, mask)
    userinfo, bare, parameter = _patterns()
    text = userinfo.sub(lambda found: _masked(found, mask, 1), text)
    if url:
        text = bare.sub(lambda found: _masked(found, mask, 1), text)
    return parameter.sub(lambda found: _masked(found, mask, 0), text)


def _masked(found: re.Match[str], mask: str, tail: int) -> str:
    """The match with its secret (what follows group 1, less ``tail`` closing characters) as ``mask``."""
    whole, head = found.group(0), found.group(1)
    if whole[len(head) : len(whole) - tail] in _MASKS:
        return whole
    return f"{head}{mask}{whole[len(whole) - tail :]}"
