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
            size = len(self.tokenizer)
            texts = self.tokenizer.batch_decode([[i] for i in range(size)], clean_up_tokenization_spaces=False)
            mapping: dict[str, list[int]] = {}
            for index, text in enumerate(texts):
                if text:
                    mapping.setdefault(text, []).append(index)
            self._texts_to_ids = mapping
        return self._texts_to_ids
