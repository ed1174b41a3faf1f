"""The words of an input as features a head reads beside the model's: n-grams, TF-IDF weighted.

A hidden-state head and a bag of words err on different rows (docs/fitting.md), so a field's head may
also read the input's word 1-2-grams and character 2-5-grams (taken within words, each word padded with
a space on either side, so a gram knows where a word starts and ends): counted in code from the text the
field reads, with no model call. Counts are damped (1 + log count), weighted by each gram's inverse
document frequency over the fitting rows, and the vector is scaled to unit length. The vocabulary is the
fitting rows' grams, bounded to the most frequent; a gram outside it counts for nothing.

`analyse` is the one tokenisation, used to fit the vocabulary (`fitting.lexical`) and to read a request.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Sequence

import torch

WORD = re.compile(r"(?u)\b\w\w+\b")
"""A word: two or more word characters (scikit-learn's default token pattern)."""
WORD_NGRAMS = (1, 2)
CHAR_NGRAMS = (2, 5)


def analyse(text: str) -> list[str]:
    """Every gram of `text`, each prefixed by its kind: `w ` a word n-gram, `c ` a character n-gram."""
    folded = text.casefold()
    words = WORD.findall(folded)
    grams = [f"w {word}" for word in words]
    grams += [f"w {first} {second}" for first, second in zip(words, words[1:])]
    low, high = CHAR_NGRAMS
    for word in folded.split():
        padded = f" {word} "
        for n in range(low, high + 1):
            if n > len(padded):
                break
            grams.extend(f"c {padded[i:i + n]}" for i in range(len(padded) - n + 1))
    return grams


@dataclass(frozen=True)
class Lexicon:
    """The grams a head reads (in column order) and their inverse document frequencies."""

    terms: tuple[str, ...]
    idf: torch.Tensor
    """[terms] float32."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "_columns", {term: column for column, term in enumerate(self.terms)})

    def __len__(self) -> int:
        return len(self.terms)

    def vector(self, text: str) -> torch.Tensor:
        """[terms] float32: the text's damped, idf-weighted gram counts, of unit length (zero when it has no known gram)."""
        columns: dict[int, int] = {}
        known = self._columns  # type: ignore[attr-defined]
        for gram, count in Counter(analyse(text)).items():
            column = known.get(gram)
            if column is not None:
                columns[column] = count
        out = torch.zeros(len(self.terms), dtype=torch.float32)
        if columns:
            index = torch.tensor(list(columns), dtype=torch.long)
            counts = torch.tensor([1.0 + math.log(c) for c in columns.values()], dtype=torch.float32)
            values = counts * self.idf[index]
            out[index] = values / values.norm()
        return out

    def vectors(self, texts: Sequence[str]) -> torch.Tensor:
        return torch.stack([self.vector(text) for text in texts]) if texts else torch.zeros(0, len(self.terms))

    def to_json(self) -> str:
        return json.dumps(list(self.terms), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, terms: str, idf: torch.Tensor) -> Lexicon:
        return cls(tuple(json.loads(terms)), idf.to(torch.float32))


def lexical_text(payload: Any) -> str:
    """The text a field's words are read from: the input as the prompt renders it (a string as it is, a
    conversation as its transcript, structured data as its JSON), or a conversation's own turns joined
    for a rubric that reads turns (their content is what the user wrote)."""
    from ...compiler.inputs import render_input

    if isinstance(payload, list) and all(isinstance(m, dict) and "content" in m for m in payload):
        return "\n".join(str(m["content"]) for m in payload)
    return render_input(payload)
