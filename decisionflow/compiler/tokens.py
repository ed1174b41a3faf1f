"""The few tokenizer operations the compiler needs, behind one small view with its own caches."""

from __future__ import annotations

from typing import Any, Iterable


class TokenizerView:
    """The few tokenizer operations the compiler needs, with per-tokenizer caches."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self._texts_to_ids: dict[str, list[int]] | None = None

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Iterable[int]) -> str:
        return self.tokenizer.decode(list(ids), clean_up_tokenization_spaces=False)

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
    to_latin1 = {ord(character): chr(byte) for byte, character in _bytes_to_unicode().items()}
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


def _bytes_to_unicode() -> dict[int, str]:
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
