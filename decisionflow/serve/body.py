"""Reading a request body: bounded in size, parsed as JSON, and refused when an object repeats a key.

JSON parsers keep the last of two equal keys without a word, so `{"criteria": {"spam": ..., "spam":
...}}` would silently become a one-label question. Every object is parsed with its key order and
remembers its first repeated key; `first_repeated_key` finds it with its location.
"""

from __future__ import annotations

import json
from typing import Any, AsyncIterator

from ..errors import DataError
from .refusals import HttpRefusal, Located, field_path


class ParsedObject(dict):
    """A JSON object that remembers the first key it saw twice (None when every key is distinct)."""

    repeated: str | None = None


def _object(pairs: list[tuple[str, Any]]) -> ParsedObject:
    parsed = ParsedObject()
    for key, value in pairs:
        if key in parsed and parsed.repeated is None:
            parsed.repeated = key
        parsed[key] = value
    return parsed


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
        return json.loads(text, object_pairs_hook=_object)
    except json.JSONDecodeError as error:
        raise Located(
            DataError(f"the request body is not valid JSON: {error.msg} (line {error.lineno}, column {error.colno})"),
            "body",
        ) from None
    except RecursionError:
        raise Located(DataError("the request body nests JSON too deeply"), "body") from None


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
