"""The few tokenizer operations the compiler needs, behind one small view with its own caches."""

from __future__ import annotations

import re
from typing import Any, Iterable, Sequence


class TokenizerView:
    """The few tokenizer operations the compiler needs, with per-tokenizer caches."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self._texts_to_ids: dict[str, list[int]] | None = None
        self._longest_text: int | None = None

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Iterable[int]) -> str:
        return self.tokenizer.decode(list(ids), clean_up_tokenization_spaces=False)

    def cut(self, text: str, budget: int) -> str | None:
        """`text` cut to its first `budget` tokens, or None when it holds no more. The
        cut falls at the end of the last kept token's characters (the tokenizer's offsets), or, for a
        tokenizer that gives none, at the decoded text of the kept tokens."""
        try:
            encoded = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
            offsets = encoded["offset_mapping"]
        except (NotImplementedError, ValueError, KeyError, TypeError):
            offsets = None
            ids = self.encode(text)
        else:
            ids = encoded["input_ids"]
        if len(ids) <= budget:
            return None
        if offsets is not None and len(offsets) == len(ids):
            kept = text[: offsets[budget - 1][1]]
        else:
            kept = self.decode(ids[:budget]).rstrip("\ufffd")  # a byte-level token split inside a character
        return kept.rstrip()

    def suffix_after(self, anchor_ids: list[int], anchor: str, text: str) -> list[int] | None:
        """Tokens of `text` when it follows `anchor`, or None if the tokenizer merges across the seam."""
        ids = self.encode(anchor + text)
        if ids[: len(anchor_ids)] != anchor_ids:
            return None
        return ids[len(anchor_ids):]

    @property
    def texts_to_ids(self) -> dict[str, list[int]]:
        """Every vocabulary entry's decoded text -> the ids that decode to it."""
        if self._texts_to_ids is None:
            texts = token_texts(self.tokenizer)
            mapping: dict[str, list[int]] = {}
            for index, text in enumerate(texts):
                if text:
                    mapping.setdefault(text, []).append(index)
            self._texts_to_ids = mapping
        return self._texts_to_ids

    @property
    def longest_text(self) -> int:
        """Characters in the longest vocabulary entry's text: no longer text is one token."""
        if self._longest_text is None:
            self._longest_text = max(map(len, self.texts_to_ids), default=0)
        return self._longest_text


def token_texts(tokenizer: Any) -> list[str]:
    """The decoded text of every token id, as `decode([id])` gives it.

    Byte-level vocabularies (GPT-2 style: SmolLM2, Llama 3, Qwen) map each token's characters back to
    bytes directly, about twenty times faster than decoding ids one by one; other vocabularies decode.
    """
    size = len(tokenizer)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or type(backend.decoder).__name__ != "ByteLevel":
        return tokenizer.batch_decode([[i] for i in range(size)], clean_up_tokenization_spaces=False)
    # Each printable stand-in character becomes the latin-1 character of its byte (C-speed `translate`);
    # characters outside the byte map are dropped.
    to_latin1 = {ord(character): chr(byte) for byte, character in bytes_to_unicode().items()}
    added = {index: token.content for index, token in getattr(tokenizer, "added_tokens_decoder", {}).items()}
    texts = []
    for index, piece in enumerate(tokenizer.convert_ids_to_tokens(list(range(size)))):
        if index in added:
            texts.append(added[index])
        elif piece is None:
            texts.append("")
        else:
            raw = piece.translate(to_latin1).encode("latin-1", errors="ignore")
            texts.append(raw.decode("utf-8", errors="replace"))
    return texts


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map, which byte-level vocabularies are written in."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + list(
        range(ord("\u00ae"), ord("\u00ff") + 1)
    )
    characters = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            characters.append(256 + extra)
            extra += 1
    return {byte: chr(code) for byte, code in zip(printable, characters)}


def token_text(tokenizer: Any, ids: Sequence[int]) -> str:
    """Tokens as text, with the bytes of an incomplete UTF-8 character (a token that ends or begins
    inside one, such as the first bytes of an emoji) written `<0xF0><0x9F>`, as byte-fallback
    vocabularies name such tokens, instead of decoding them to U+FFFD."""
    data = token_bytes(tokenizer, ids)
    if data is None:
        return tokenizer.decode(list(ids), clean_up_tokenization_spaces=False)
    return readable_bytes(data)


def token_bytes(tokenizer: Any, ids: Sequence[int]) -> bytes | None:
    """The bytes `ids` stand for in a byte-level vocabulary (GPT-2 style: SmolLM2, Llama 3, Qwen), or in
    a byte-fallback one (`<0xF0>` pieces); None for other vocabularies and special tokens."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    pieces = tokenizer.convert_ids_to_tokens(list(ids))
    if any(piece is None for piece in pieces) or set(ids) & set(getattr(tokenizer, "all_special_ids", ())):
        return None
    if backend is not None and type(backend.decoder).__name__ == "ByteLevel":
        to_byte = {character: byte for byte, character in bytes_to_unicode().items()}
        if all(character in to_byte for piece in pieces for character in piece):
            return bytes(to_byte[character] for piece in pieces for character in piece)
        return None
    if any(_BYTE_PIECE.fullmatch(piece) for piece in pieces):
        # Sentencepiece pieces: `<0xNN>` is one byte, `▁` a space, anything else its own text.
        out = bytearray()
        for piece in pieces:
            match = _BYTE_PIECE.fullmatch(piece)
            out += bytes([int(match.group(1), 16)]) if match else piece.replace("\u2581", " ").encode("utf-8")
        return bytes(out)
    return None


_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def readable_bytes(data: bytes) -> str:
    """UTF-8 text, each byte that is not part of a complete character written `<0xNN>`."""
    parts = []
    while data:
        try:
            parts.append(data.decode("utf-8"))
            break
        except UnicodeDecodeError as error:
            parts.append(data[: error.start].decode("utf-8"))
            parts.extend(f"<0x{byte:02X}>" for byte in data[error.start : error.end])
            data = data[error.end :]
    return "".join(parts)
