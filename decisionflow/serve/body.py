"""Reading a request body: JSON only, bounded in size, parsed strictly, and refused when an object repeats a key.

JSON parsers keep the last of two equal keys without a word, so `{"criteria": {"spam": ..., "spam":
...}}` would silently become a one-label question. Every object is parsed with its key order and
remembers its first repeated key; `first_repeated_key` finds it with its location.

What Python's parser accepts beyond JSON is refused too: `NaN`, `Infinity` and `-Infinity`, a number too
large for a double (`1e400` would become infinity), and an integer literal of more than 4,300 digits
(Python refuses to convert it; the refusal is this request's 400, not the server's 500).
"""

from __future__ import annotations

import json
from typing import Any, AsyncIterator, Callable, Sequence

from ..errors import DataError
from ..spec.text import code_point, first_lone_surrogate
from .refusals import HttpRefusal, Located, field_path

MAX_INTEGER_DIGITS = 4300
"""Python's own default limit on converting digits to an int (`sys.get_int_max_str_digits`), held here
whatever the interpreter is configured with: past it, converting costs time quadratic in the length."""
JSON_MEDIA_TYPES = ("application/json",)


class ParsedObject(dict):
    """A JSON object that remembers the first key it saw twice (None when every key is distinct)."""

    repeated: str | None = None


class _NotJson(Exception):
    """Raised from inside the parser's hooks; becomes the body's `DataError`."""


def _object(pairs: list[tuple[str, Any]]) -> ParsedObject:
    parsed = ParsedObject()
    for key, value in pairs:
        if key in parsed and parsed.repeated is None:
            parsed.repeated = key
        parsed[key] = value
    return parsed


def _constant(name: str) -> Any:
    raise _NotJson(f"{name} is not a JSON number (JSON has no NaN or infinity)")


def _float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _NotJson(f"the number {text[:20]}{'...' if len(text) > 20 else ''} is too large for a double")
    return value


def _int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INTEGER_DIGITS:
        raise _NotJson(f"an integer of {digits} digits; at most {MAX_INTEGER_DIGITS} are accepted")
    return int(text)


def json_content_type(header: str | None) -> bool:
    """Whether a `Content-Type` says JSON: `application/json` (any case, parameters allowed, and only
    `charset=utf-8` among charsets: JSON is UTF-8)."""
    if not header:
        return False
    media, *parameters = (part.strip() for part in header.split(";"))
    if media.lower() not in JSON_MEDIA_TYPES:
        return False
    for parameter in parameters:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset" and value.strip().strip('"').lower() not in ("utf-8", "utf8"):
            return False
    return True


async def read_body(chunks: AsyncIterator[bytes], declared_length: str | None, limit: int) -> bytes:
    """The whole body, refused (413, field `body`) as soon as it is known to exceed `limit` bytes."""
    too_large = HttpRefusal(413, "PayloadTooLarge", f"the request body is larger than {limit} bytes", field="body")
    if declared_length is not None and declared_length.isdigit() and int(declared_length) > limit:
        raise too_large
    received = bytearray()
    async for chunk in chunks:
        received += chunk
        if len(received) > limit:
            raise too_large
    return bytes(received)


def parse_json(body: bytes) -> Any:
    """The body as JSON; malformed JSON is a `DataError` (400) located at `body`."""
    if not body.strip():
        raise Located(DataError("the request body is empty; send a JSON object"), "body")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise Located(DataError(f"the request body is not UTF-8 ({error.reason} at byte {error.start})"), "body") from None
    try:
        return json.loads(text, object_pairs_hook=_object, parse_constant=_constant, parse_float=_float, parse_int=_int)
    except json.JSONDecodeError as error:
        raise Located(
            DataError(f"the request body is not valid JSON: {error.msg} (line {error.lineno}, column {error.colno})"),
            "body",
        ) from None
    except _NotJson as error:
        raise Located(DataError(f"the request body is not valid JSON: {error}"), "body") from None
    except RecursionError:
        raise Located(DataError("the request body nests JSON too deeply"), "body") from None
    except ValueError as error:  # a conversion the hooks did not foresee: still the body's fault
        raise Located(DataError(f"the request body holds a value that cannot be read: {error}"), "body") from None


def lone_surrogate(text: str) -> str | None:
    """`U+D800` for the first lone surrogate in `text` (a `\\ud800` escape with no pair: not Unicode text), else None."""
    index = first_lone_surrogate(text)
    return None if index is None else code_point(text[index])


def request_object(body: Any, *, shape: str = "", allowed: Sequence[str] | None = None,
                   repeated_key: Callable[[str, str], Exception] | None = None) -> dict[str, Any]:
    """`body` as the JSON object every route takes, each refusal a located 400: not an object (`shape` says
    what it should look like), a key written twice anywhere in it (`repeated_key(where, key)` words it where a
    route knows better), and, given `allowed`, a top-level key outside them."""
    if not isinstance(body, dict):
        raise Located(DataError(f"the request body must be a JSON object{shape}, got {json_type(body)}"), "body")
    repeated = first_repeated_key(body)
    if repeated is not None:
        if repeated_key is not None:
            raise repeated_key(*repeated)
        raise Located(DataError(f"key {repeated[1]!r} appears twice in the same object"), repeated[0])
    unknown = [key for key in body if allowed is not None and key not in allowed]
    if unknown:
        raise Located(DataError(f"unknown key {unknown[0]!r} (allowed: {', '.join(allowed or ())})"), field_path(unknown[0]))
    return body


def first_repeated_key(value: Any, *path: str | int) -> tuple[str, str] | None:
    """(location of the object, the key) of the first object anywhere in `value` that repeats a key."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, ParsedObject):
            if item.repeated is not None:
                return field_path(*where) or "body", item.repeated
            stack.extend((child, (*where, key)) for key, child in reversed(list(item.items())))
        elif isinstance(item, list):
            stack.extend((child, (*where, index)) for index, child in reversed(list(enumerate(item))))
    return None


def json_type(value: Any) -> str:
    """What a parsed JSON value is, in the request's terms. By `isinstance`: objects are parsed as
    `ParsedObject` (a dict subclass), and a Python class name means nothing to a client."""
    if value is None:
        return "null"
    for kind, name in ((bool, "a boolean"), ((int, float), "a number"), (str, "a string"), (dict, "an object"),
                       (list, "a list")):
        if isinstance(value, kind):
            return name
    return "a value JSON cannot hold"


def input_shape_problem(value: Any) -> str | None:
    """Why a rubric route's input is not one it decides, in the request's terms; None when it is. A
    string, an object, a conversation or another structured list is an input (the input policy; the
    engine checks a conversation's messages); a number, a boolean, null, an empty list and a list of
    strings (`texts` mistyped as `text`) are not."""
    if isinstance(value, (str, dict)):
        return None
    if isinstance(value, list):
        if not value:
            return "an empty list"
        if all(isinstance(item, str) for item in value):
            return f"a list of {len(value)} string{'s' if len(value) != 1 else ''}"
        return None
    return json_type(value)
