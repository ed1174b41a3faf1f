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
        object.__setattr__(self, "_idf", self.idf.double().tolist())

    def __len__(self) -> int:
        return len(self.terms)

    def weights(self, text: str) -> tuple[list[int], list[float]]:
        """The text's known grams (columns, ascending) and their weights: damped count × idf, scaled to unit
        length, in float64. The one computation of a text's vector, for the fit's sparse matrices
        (`fitting.lexical.word_matrix`) and a request's dense vector (`vector`) alike."""
        known, idf = self._columns, self._idf  # type: ignore[attr-defined]
        counts: dict[int, int] = {}
        for gram, count in Counter(analyse(text)).items():
            column = known.get(gram)
            if column is not None:
                counts[column] = count
        columns = sorted(counts)
        values = [(1.0 + math.log(counts[column])) * idf[column] for column in columns]
        norm = math.sqrt(sum(value * value for value in values))
        return (columns, [value / norm for value in values]) if norm else ([], [])

    def vector(self, text: str) -> torch.Tensor:
        """[terms] float32: `weights` as a dense vector (zero when the text has no known gram)."""
        columns, values = self.weights(text)
        out = torch.zeros(len(self.terms), dtype=torch.float32)
        if columns:
            out[torch.tensor(columns, dtype=torch.long)] = torch.tensor(values, dtype=torch.float32)
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
