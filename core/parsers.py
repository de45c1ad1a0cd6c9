"""The API's request parsers: what any body can cost the server is bounded before it is parsed.

`JSONParser` is the one JSON parser of the whole API (REST_FRAMEWORK's DEFAULT_PARSER_CLASSES): a body
over `max_body_bytes` is a 413, nesting deeper than `max_depth` a 400 (Python's json module recurses per
level, so a few KB of brackets would otherwise end in a RecursionError), a charset that is not a text
encoding a 415, a key given twice in one object a 400, a lone surrogate (`"\ud800"`, in a key or a value, at
any depth) a 400 naming where it is (`$.work.env`): Python's json module reads such an escape into a str that
UTF-8 cannot encode, which would otherwise end in a 500 at the database or a log. An integer of more than 100
digits is a 400 in words.
Other parsers (tenancy's telemetry text) read and decode their bodies with `read_body` and `decode_body`.
"""

from __future__ import annotations

import re

from django.utils.http import parse_header_parameters
from django.utils.translation import gettext, gettext_lazy
from rest_framework import parsers, renderers, status
from rest_framework.exceptions import APIException, ParseError, UnsupportedMediaType
from rest_framework.settings import api_settings
from rest_framework.utils import json

MIB = 1024 * 1024

# A \uD800-\uDFFF escape: the only way a lone surrogate gets into a body decoded strictly from UTF-8.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A JSON string (escapes included) or a bracket: brackets inside strings are skipped when counting depth.
_STRING_OR_BRACKET = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[][{}]')


class PayloadTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = gettext_lazy("The request body is too large.")
    default_code = "payload_too_large"


def size_in_words(limit: int) -> str:
    if limit >= MIB and limit % MIB == 0:
        return gettext("%(n)s MiB") % {"n": limit // MIB}
    return gettext("%(n)s bytes") % {"n": limit}


def read_body(stream, limit: int) -> bytes:
    """The body, or PayloadTooLarge (413) naming `limit` once more than `limit` bytes arrive."""
    body = stream.read(limit + 1) if stream is not None else b""
    if len(body) > limit:
        raise PayloadTooLarge(
            gettext("the request body is larger than %(size)s, this API's limit")
            % {"size": size_in_words(limit)}
        )
    return body


def decode_body(body: bytes, media_type: str | None, parser_context: dict | None) -> str:
    """The body as text in the Content-Type's charset (default: the request's encoding, else UTF-8).

    A charset Python does not know, or one that is not a text encoding (`hex`, `rot13`, `base64`), is a 415
    naming it; bytes that are not valid in the charset are a 400.
    """
    _, params = parse_header_parameters(media_type or "")
    charset = params.get("charset") or (parser_context or {}).get("encoding") or "utf-8"
    try:
        text = body.decode(charset)
    except LookupError:
        raise UnsupportedMediaType(
            media_type,
            detail=gettext("charset %(charset)s is not a text encoding this API reads: send UTF-8")
            % {"charset": repr(charset)},
        ) from None
    except UnicodeDecodeError as error:
        raise ParseError(
            gettext("the body is not %(charset)s text: %(error)s") % {"charset": charset, "error": error}
        ) from error
    if _has_surrogate(text):  # a charset such as unicode-escape can decode bytes to a lone surrogate
        raise ParseError(
            gettext(
                "the body holds a lone surrogate (half of a UTF-16 pair, not a character) once decoded as "
                "%(charset)s: send UTF-8"
            )
            % {"charset": charset}
        )
    return text


def nesting_deeper_than(text: str, limit: int) -> bool:
    """Whether JSON `text` nests arrays and objects more than `limit` levels deep (counted without recursion).

    Brackets inside strings do not count; in malformed JSON the count is an upper bound.
    """
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        first = match.group()[0]
        if first in "[{":
            depth += 1
            if depth > limit:
                return True
        elif first in "]}":
            depth -= 1
    return False


class JSONParser(parsers.BaseParser):
    """JSON with a size limit (413), a depth limit (400) and a charset check (415).

    A BaseParser, not a subclass of DRF's JSONParser: DRF reads the whole body into memory (Django's
    `request.body`) before it calls its own JSONParser or a subclass, so only this way does the size limit
    apply while the body is read.
    """

    media_type = "application/json"
    renderer_class = renderers.JSONRenderer
    strict = api_settings.STRICT_JSON
    max_body_bytes = 4 * MIB  # a discovery report of a whole tray, nvidia-smi XML included, is ~100 KB
    max_depth = 64  # legitimate bodies (a job's `work`, a plan's layout) nest a few levels

    def parse(self, stream, media_type=None, parser_context=None):
        text = decode_body(read_body(stream, self.max_body_bytes), media_type, parser_context)
        if nesting_deeper_than(text, self.max_depth):
            raise ParseError(
                gettext(
                    "the JSON body nests arrays and objects more than %(depth)s levels deep, this API's limit"
                )
                % {"depth": self.max_depth}
            )
        try:
            data = json.loads(
                text,
                parse_constant=json.strict_constant if self.strict else None,
                parse_int=bounded_int,
                object_pairs_hook=unique_keys,
            )
        except (DuplicateKey, NumberTooLong) as error:
            raise ParseError(str(error)) from error
        except ValueError as error:
            # Python's own words about the JSON (line and column) stay English.
            raise ParseError(gettext("JSON parse error - %(error)s") % {"error": error}) from error
        # decode_body refused raw ones: only a \uD800-\uDFFF escape can bring one, most bodies skip the walk.
        if _SURROGATE_ESCAPE.search(text):
            where = lone_surrogate_at(data)
            if where:
                raise ParseError(
                    gettext(
                        "the JSON body holds a lone surrogate (a \\uD800-\\uDFFF escape without its pair, "
                        "not a character) in %(where)s: send text as UTF-8 or escape whole surrogate pairs"
                    )
                    % {"where": where}
                )
        return data


class DuplicateKey(ValueError):
    pass


class NumberTooLong(ValueError):
    pass


# Beyond any count or id this API takes (an int64 has 19 digits), and room for a field sent a 128-bit UUID
# or a SHA-256 as a number (39 and 78 digits), which its serializer then refuses by name.
MAX_INTEGER_DIGITS = 100


def bounded_int(text: str) -> int:
    """A JSON integer of at most MAX_INTEGER_DIGITS digits: longer ones are refused in words (Python's own
    limit, 4,300 digits, answered "use sys.set_int_max_str_digits() to increase the limit")."""
    if len(text.lstrip("-")) > MAX_INTEGER_DIGITS:
        raise NumberTooLong(
            gettext(
                "the JSON body holds an integer of %(digits)s digits: no field of this API takes more "
                "than %(most)s"
            )
            % {"digits": len(text.lstrip("-")), "most": MAX_INTEGER_DIGITS}
        )
    return int(text)


def unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object as a dict, refusing a key given twice: `{"gpus": 4, "gpus": 8}` would otherwise mean
    8 silently (the last wins), and a proxy or a log reading the first would see another request."""
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(
                    gettext("the JSON body gives the key %(key)s twice in one object: send it once")
                    % {"key": repr(key)}
                )
            seen.add(key)
    return result


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _path_key(key: str) -> str:
    if _IDENTIFIER.fullmatch(key):
        return f".{key}"
    return f"[{json.dumps(key)}]"  # ensure_ascii: a surrogate in the key shows as its escape


def lone_surrogate_at(data) -> str | None:
    """Where in parsed JSON `data` a lone surrogate is, in words with a JSONPath (`the value at $.name`,
    `the key "\\ud800" of $.work.env`), or None. Walked without recursion (the depth is bounded anyway)."""
    stack = [(data, "$")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            if _has_surrogate(value):
                return gettext("the value at %(path)s") % {"path": path}
        elif isinstance(value, dict):
            for key, item in reversed(value.items()):
                if _has_surrogate(key):
                    return gettext("the key %(key)s of %(path)s") % {"key": json.dumps(key), "path": path}
                stack.append((item, path + _path_key(key)))
        elif isinstance(value, list):
            stack.extend((item, f"{path}[{index}]") for index, item in reversed(list(enumerate(value))))
    return None
