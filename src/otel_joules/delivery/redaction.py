"""Secrets out of exported command lines.

``process.command_line`` goes to every backend a span reaches, and command lines carry
passwords and tokens (``--password=...``, ``curl -H 'Authorization: Bearer ...'``,
``postgres://user:pass@host``). The OpenTelemetry semantic conventions mark it sensitive
and redact URL credentials as ``REDACTED``; :func:`redact_command` does that and more by
default, and ``OTEL_JOULES_FULL_COMMAND_LINE=true`` exports the command line as is.

Redacted, case-insensitively, where a name contains ``password``, ``passwd``, ``pass``, ``pwd``,
``secret``, ``token``, ``api-key``/``api_key``/``apikey``, ``access-key``, ``private-key``,
``credential``, ``auth``, ``authorization``, ``cookie``, ``session`` or ``signature`` as a word
(``--db-password``, ``HF_TOKEN``; not ``--max-tokens`` or ``--author``):

* ``--name=value``, ``name=value`` and URL query parameters ``?name=value&``: the value;
* ``--name value`` (a flag followed by a separate argument): that argument;
* ``scheme://user:password@host``: user and password (``REDACTED:REDACTED``);
* HTTP headers ``Authorization: ...``, ``Proxy-Authorization: ...``, ``Cookie: ...``,
  ``X-API-Key: ...``: the value.
"""

from __future__ import annotations

import re
import shlex
from typing import Sequence

from otel_joules.exporters.records import valid_text

#: What stands in for a removed value (the semantic conventions' word).
REDACTED = "REDACTED"

# A secret word ends a name or is followed by a non-letter ("--max-tokens", "--author" and
# "--tokenizer" are not secrets); short words must also start one ("--bypass-cache").
_SECRET_WORD = (
    r"(?:passwords?|passwd|secrets?|token|api[-_]?key|apikey|access[-_]?key|private[-_]?key|credentials?"
    r"|authorization|cookies?|session|signature|(?<![A-Za-z])(?:pass|pwd|auth))(?![A-Za-z])"
)
# A name (flag, key or query parameter) containing a secret word, then "=" and the value.
_NAME_VALUE = re.compile(rf"(?i)((?:^|(?<=[?&;,\s]))-{{0,2}}[\w.-]*{_SECRET_WORD}[\w.-]*=)([^&;,\s]*)")
# A flag whose value is the next argument.
_SECRET_FLAG = re.compile(rf"(?i)^-{{1,2}}[\w.-]*{_SECRET_WORD}[\w.-]*$")
_URL_CREDENTIALS = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s:]+:[^/@\s]*@")
_SECRET_HEADER = re.compile(r"(?i)^(\s*(?:proxy-)?(?:authorization|cookie|x-api-key|x-auth-token)\s*:\s*).+$")


def redact_argument(argument: str) -> str:
    """One argument with the values that look like secrets replaced by :data:`REDACTED`."""
    header = _SECRET_HEADER.match(argument)
    if header:
        return header.group(1) + REDACTED
    redacted = _URL_CREDENTIALS.sub(rf"\1{REDACTED}:{REDACTED}@", argument)
    return _NAME_VALUE.sub(lambda m: m.group(1) + (REDACTED if m.group(2) else ""), redacted)


def redact_command(command: Sequence[str]) -> list[str]:
    """``command``'s arguments with secret-looking values redacted (see the module docstring)."""
    out: list[str] = []
    value_is_secret = False
    for argument in command:
        if value_is_secret and not argument.startswith("-"):
            out.append(REDACTED)
            value_is_secret = False
            continue
        value_is_secret = bool(_SECRET_FLAG.match(argument))
        out.append(redact_argument(argument))
    return out


def command_line(command: Sequence[str], *, full: bool = False) -> str:
    """``process.command_line`` for ``command``: shell-quoted, redacted unless ``full``; an argument that is not
    UTF-8 (Python holds its bytes as lone surrogates) shows U+FFFD there, which every exporter can carry (the gRPC
    exporter drops an attribute with a surrogate, protobuf's JSON parser rejects its escape)."""
    return valid_text(shlex.join(command if full else redact_command(command)))
