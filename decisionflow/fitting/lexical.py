"""Fitting what reads the input's words: the lexicon of the fitting rows, and logistic regressions on it.

The vectors here are `runtime.heads.lexical.Lexicon.weights`, the one computation a request's vector comes from
too (the same grams, damping, inverse document frequencies and unit length), as a sparse matrix for scikit-learn. The lexicon is
fitted on the rows' texts alone (no label), keeping the grams of at least `MIN_DOCUMENTS` rows, the most
frequent first, up to `MAX_TERMS`.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from ..runtime.heads.lexical import Lexicon, analyse

MIN_DOCUMENTS = 2
"""A gram of fewer fitting rows is left out: on BANKING77 keeping every gram (18,424 against 10,114) changed
the n-gram head's accuracy by under half a point either way (docs/fitting.md)."""
MAX_TERMS = 50_000
"""The lexicon's bound: the heads file holds a weight per term and answer (BANKING77: 10,114 terms)."""
WORDS_C = 10.0
"""The n-gram head's inverse regularisation strength: on BANKING77 and SST-2, 3, 10 and 30 were within a
point of each other across folds (docs/fitting.md)."""


def fit_lexicon(texts: Sequence[str], *, min_documents: int = MIN_DOCUMENTS, max_terms: int = MAX_TERMS) -> Lexicon:
    """The grams of `texts` that at least `min_documents` of them hold (the most frequent `max_terms`), with
    smoothed inverse document frequencies, ln((1 + n) / (1 + df)) + 1."""
    documents: Counter[str] = Counter()
    for text in texts:
        documents.update(set(analyse(text)))
    kept = [(gram, df) for gram, df in documents.items() if df >= min_documents]
    kept.sort(key=lambda item: (-item[1], item[0]))
    kept = sorted(kept[:max_terms])
    n = len(texts)
    idf = torch.tensor([math.log((1 + n) / (1 + df)) + 1.0 for _, df in kept], dtype=torch.float32)
    return Lexicon(tuple(gram for gram, _ in kept), idf)


def word_matrix(lexicon: Lexicon, texts: Sequence[str]) -> Any:
    """[rows, terms] scipy CSR float64: each text's `Lexicon.weights`, the vector a request is read with."""
    import numpy as np
    from scipy.sparse import csr_matrix

    data: list[float] = []
    indices: list[int] = []
    pointers = [0]
    for text in texts:
        columns, values = lexicon.weights(text)
        indices.extend(columns)
        data.extend(values)
        pointers.append(len(indices))
    return csr_matrix((np.array(data, dtype=np.float64), np.array(indices, dtype=np.int64), np.array(pointers, dtype=np.int64)),
                      shape=(len(texts), len(lexicon.terms)))


@dataclass
class WordsHead:
    """A logistic regression on the words: scores over the classes it saw."""

    weight: Any  # [classes, terms]
    bias: Any  # [classes]
    classes: Any

    def scores(self, matrix: Any) -> Any:
        return matrix @ self.weight.T + self.bias

    def tensors(self, temperature: float, answers: int, unseen_bias: float) -> tuple[torch.Tensor, torch.Tensor]:
        """(weight [answers, terms], bias [answers]) with the temperature in; an answer without rows gets no
        weight and a bias that keeps its probability at nothing."""
        import numpy as np

        weight = np.zeros((answers, self.weight.shape[1]))
        bias = np.full(answers, unseen_bias)
        weight[self.classes], bias[self.classes] = self.weight / temperature, self.bias / temperature
        return torch.tensor(weight, dtype=torch.float32), torch.tensor(bias, dtype=torch.float32)


def fit_words(matrix: Any, gold: Any, *, c: float = WORDS_C) -> WordsHead:
    """A multinomial logistic regression (L2, lbfgs) on word vectors."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    regression = LogisticRegression(C=c, max_iter=2000, tol=1e-4).fit(matrix, gold)
    weight, bias = regression.coef_, regression.intercept_
    if weight.shape[0] == 1:  # two classes: scikit-learn keeps one row; as two, the softmax is its sigmoid
        weight, bias = np.concatenate([-weight / 2, weight / 2]), np.concatenate([-bias / 2, bias / 2])
    return WordsHead(weight, bias, regression.classes_)
