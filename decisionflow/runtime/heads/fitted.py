"""Fitted decision heads: a small classifier per field on the hidden states the branch pass computes.

At a field's answer position the model's last hidden state is what its LM head reads to score the
next token. A fitted head reads the same position (and a lower layer) plus the field's zero-shot
log-probabilities, and maps them to a distribution over the field's answers with a multinomial
logistic regression learned from labelled rows (`fitting.head_fit`), or for a score field possibly an ordinal
head: the level regressed on the features, read as a normal over the levels, also a linear map. It
needs no extra pass and no extra token: the features come out of the pass that reads the field anyway.

A fused head weighs the log-probabilities of such a head, of an n-gram head on the input's words, of
the zero-shot readout and of a head on the input's mean hidden state (the pass that feeds the input hands
it back): still no extra pass.

A rubric's heads live in one file beside it, `triage.yaml` -> `triage.heads.safetensors`: per fitted
field its weights, bias and feature standardisation, and in the file's header the metadata that
says what they were fitted for (model and rubric fingerprints, the prompt, each field's answers and
features, the cross-validated figures of every readout the fit compared, rows per label). A head
fitted for another model, rubric, prompt or option set is refused, naming the mismatch. A field
whose fit chose the zero-shot readout has metadata but no weights: the file records why.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_serializer

from ...errors import HeadsError
from ...paths import read_saved_tensors, readable_copy, write_atomically
from ...spec.rubric import Rubric
from .lexical import Lexicon

FORMAT = 3
"""2: a field's head may also read the input's words (an n-gram head), alone or fused with the hidden-state
head and the zero-shot readout; the file then holds the lexicon. 3: a fused head may have a fourth member, a
head on the input's mean hidden state (`FieldHeadInfo.mean_layers`). Format-1 and -2 files load and answer as
before."""
READ_FORMATS = (1, 2, 3)
DEFAULT_LAYERS = (-1, -8)
"""Hidden layers a head reads, counted from the top (see `forward.Capture`): the LM head's input and the
eighth layer from the top, the best pair in cross-validation on every development set's training
rows (docs/fitting.md). A model with fewer layers reads the ones it has."""
DEFAULT_MEAN_LAYERS = (-8,)
"""Where a fused head's input-mean member reads the hidden states averaged over the input's positions: the
eighth layer from the top (docs/fitting.md, "The input's mean as a fourth member")."""
ZERO_SHOT_FLOOR = 1e-6
"""The smallest zero-shot probability a head's log-probability features see (and what an answer the
row does not offer counts as)."""
METADATA_KEY = "decisionflow_heads"
LEXICON_KEY = "decisionflow_lexicon"
"""The n-gram heads' terms (a JSON list, in column order), beside the tensor `lexicon.idf`."""
HEAD_KINDS = ("multinomial", "ordinal", "ngram", "fused")
READOUT_METHODS = {"multinomial": "fitted", "ordinal": "fitted", "ngram": "ngram", "fused": "fused"}
"""The `method` a result names for each head that can answer a field."""
FITTED_ON_KEY = "fitted_on.input_hashes"
"""The tensor of the fitting rows' `input_hashes` (no field's tensor is named `NAME.input_hashes`)."""


class Candidate(BaseModel):
    """One readout's cross-validated figure on the fit's rows."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    accuracy: float
    low: float
    """95 % Wilson interval of the accuracy."""
    high: float
    rows: int
    p_vs_zero_shot: float | None = None
    """The p of the paired difference with the zero-shot readout on the same rows: McNemar's exact test,
    or for a score field Wilcoxon's signed-rank test on the absolute errors."""
    mean_absolute_error: float | None = None
    """A score field's mean distance between answer and gold level (None for other kinds)."""

    @model_serializer(mode="wrap")
    def _without_unused_additions(self, write: Any) -> Any:
        return _without_defaults(write(self), self, ("mean_absolute_error",))


class FieldHeadInfo(BaseModel):
    """What the fit decided for one field, and on what evidence."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    labels: tuple[str, ...]
    """The field's answers when it was fitted, in the rubric's order (the head's output order)."""
    readout: str
    """`fitted` (a head answers) or `zero_shot` (the fit kept the engine's readout)."""
    head: str = "multinomial"
    """Which head answers, or would have: `multinomial` (one class per answer, on the hidden states),
    `ordinal` (a score field's level regressed on them, read as a normal distribution over the levels),
    `ngram` (one class per answer, on the input's words) or `fused` (the log-probabilities of the
    multinomial head, the n-gram head and the zero-shot readout, and of the input-mean head where
    `mean_layers` names layers, weighted by `fusion`)."""
    fusion: tuple[float, ...] | None = None
    """A fused head's weights of the hidden-state head's, the n-gram head's and the zero-shot readout's
    log-probabilities, then the input-mean head's where it has one (fitted on the rows' out-of-fold
    log-probabilities by log-loss)."""
    mean_layers: tuple[int, ...] = ()
    """A fused head's fourth member reads the hidden states of these layers averaged over the input's
    positions (with the zero-shot log-probabilities, as the hidden-state head reads them); empty: no such
    member."""
    why: str = ""
    """Why the head that answers was kept over the other candidates."""
    layers: tuple[int, ...] = DEFAULT_LAYERS
    zero_shot_features: bool = True
    rows: int = 0
    rows_per_label: dict[str, int] = {}
    debias: str | None = None
    """The readout correction the zero-shot features were read under; the engine reads the field under
    it whenever the head applies."""
    regularisation: tuple[float, ...] = ()
    """The inverse regularisation strengths C whose regressions the head averages (empty where no head
    was cross-validated; one C in heads fitted before the path was averaged)."""
    temperature: float = 1.0
    """The averaged path's scores are divided by it (fitted on the out-of-fold scores by log-loss; the
    stored weights already include it): it sets the head's confidence, never its answer."""
    penalties: tuple[float, ...] = ()
    """The ridge penalties an ordinal head's regressions average (empty where none was cross-validated)."""
    spread: float | None = None
    """An ordinal head's width, in levels: the standard deviation of its normal around the predicted
    level (fitted on the out-of-fold predictions by log-loss; in the stored weights)."""
    folds: int | None = None
    candidates: dict[str, Candidate] = {}
    note: str = ""
    """Why the field kept the zero-shot readout, when it did."""

    @model_serializer(mode="wrap")
    def _without_unused_additions(self, write: Any) -> Any:
        return _without_defaults(write(self), self, ("head", "penalties", "spread", "fusion", "why", "mean_layers"))

    @property
    def chosen(self) -> str:
        """The candidate that answers: `zero_shot`, `fitted` (multinomial), `ordinal`, `ngram` or `fused`."""
        if self.readout != "fitted":
            return self.readout
        return "fitted" if self.head == "multinomial" else self.head

    @property
    def reads_hidden(self) -> bool:
        """Whether the answering head reads the pass's hidden states (not so for an n-gram head alone)."""
        return self.readout == "fitted" and self.head != "ngram"

    @property
    def reads_words(self) -> bool:
        return self.readout == "fitted" and self.head in ("ngram", "fused")

    @property
    def reads_means(self) -> bool:
        """Whether the answering head also reads the input's mean hidden state (a fused head's fourth member)."""
        return self.readout == "fitted" and self.head == "fused" and bool(self.mean_layers)

    @property
    def members(self) -> int:
        """How many log-probabilities a fused head weighs (`fusion`'s length)."""
        return 4 if self.mean_layers else 3

    @field_validator("regularisation", mode="before")
    @classmethod
    def _one_strength(cls, value: Any) -> Any:
        return () if value is None else (value,) if isinstance(value, (int, float)) else value


def _without_defaults(data: Any, model: BaseModel, keys: Sequence[str]) -> Any:
    """`data` without `keys` that hold their defaults: the keys added for score fields' heads, left out
    where unused so that a heads file of choice and boolean fields reads as before they existed (a
    reader that does not know them refuses unknown keys)."""
    if isinstance(data, dict):
        for key in keys:
            if getattr(model, key) == type(model).model_fields[key].default:
                data.pop(key, None)
    return data


INTERCHANGEABLE_DTYPES = frozenset({"float32", "bfloat16"})
"""Number formats whose hidden states are close enough that heads fitted in one answer as well in the other
(paired tests on every development set: docs/fitting.md, "One heads file, either number format")."""


class HeadsMetadata(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    format: int = FORMAT
    rubric: str
    rubric_fingerprint: str
    model: str
    """The fitted model's content fingerprint (`prefix_store.model_fingerprint`)."""
    model_name: str = ""
    prompt: str
    """A digest of the rubric's prefix tokens: the prompt (template, catalog) the features were read under."""
    dtype: str = ""
    weights: str = ""
    """The fitted model's fingerprint whatever its number format (`prefix_store.weights_fingerprint`): heads
    fitted in one of `INTERCHANGEABLE_DTYPES` apply in the other to the same weights. Files written before
    it was recorded apply in their own format only."""
    library: str = ""
    fields: dict[str, FieldHeadInfo] = Field(default_factory=dict)


class FieldHead:
    """One field's multinomial logistic regression over standardised features."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor, mean: torch.Tensor, scale: torch.Tensor):
        self.weight, self.bias, self.mean, self.scale = weight, bias, mean, scale

    @property
    def feature_size(self) -> int:
        return int(self.weight.shape[1])

    def logits(self, features: torch.Tensor, zero_shot: torch.Tensor | None) -> torch.Tensor:
        """[answers]: the head's scores over every answer of the field."""
        x = features if zero_shot is None else torch.cat([features, zero_shot])
        return self.weight @ ((x - self.mean) / self.scale) + self.bias

    def probabilities(self, features: torch.Tensor, zero_shot: torch.Tensor | None, offered: Sequence[int]) -> tuple[float, ...]:
        """The head's distribution over the `offered` answers (indexes into the field's labels)."""
        chosen = self.logits(features, zero_shot)[list(offered)].double()
        return tuple(torch.softmax(chosen, dim=0).tolist())


class NgramHead:
    """One field's logistic regression over the input's words (`lexical.Lexicon` vectors)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor):
        self.weight, self.bias = weight, bias
        """[answers, terms] and [answers], the temperature included."""

    def logits(self, words: torch.Tensor) -> torch.Tensor:
        return self.weight @ words + self.bias


class FieldReadout:
    """How a fitted field is answered from what a request gives it: the hidden states at its answer
    position, the engine's zero-shot distribution, the input's words."""

    def __init__(self, info: FieldHeadInfo, hidden: FieldHead | None, ngram: NgramHead | None,
                 input_mean: FieldHead | None = None):
        self.info, self.hidden, self.ngram, self.input_mean = info, hidden, ngram, input_mean

    @property
    def method(self) -> str:
        return READOUT_METHODS.get(self.info.head, "fitted")

    def probabilities(self, features: torch.Tensor | None, zero_shot: Sequence[float], offered: Sequence[int],
                      words: torch.Tensor | None, input_mean: torch.Tensor | None = None) -> tuple[float, ...]:
        """The distribution over the `offered` answers (indexes into the field's labels); `zero_shot` is the
        engine's readout over them, `features` the hidden states the head reads, `words` the input's vector,
        `input_mean` the input's mean hidden state at the head's `mean_layers`."""
        info, chosen = self.info, list(offered)
        if info.head == "ngram":
            assert self.ngram is not None and words is not None
            return _softmax(self.ngram.logits(words)[chosen])
        assert self.hidden is not None and features is not None
        zero_shot_logs = zero_shot_features(zero_shot, offered, len(info.labels))
        hidden = self.hidden.logits(features, zero_shot_logs if info.zero_shot_features else None)[chosen]
        if info.head != "fused":
            return _softmax(hidden)
        assert self.ngram is not None and words is not None and info.fusion is not None
        w_hidden, w_words, w_zero_shot = info.fusion[:3]
        combined = (w_hidden * torch.log_softmax(hidden.double(), 0)
                    + w_words * torch.log_softmax(self.ngram.logits(words)[chosen].double(), 0)
                    + w_zero_shot * zero_shot_logs[chosen].double())
        if info.reads_means:
            assert self.input_mean is not None and input_mean is not None
            mean_scores = self.input_mean.logits(input_mean, zero_shot_logs if info.zero_shot_features else None)[chosen]
            combined = combined + info.fusion[3] * torch.log_softmax(mean_scores.double(), 0)
        return _softmax(combined)


def _softmax(scores: torch.Tensor) -> tuple[float, ...]:
    return tuple(torch.softmax(scores.double(), dim=0).tolist())


def zero_shot_features(probabilities: Sequence[float], offered: Sequence[int], label_count: int) -> torch.Tensor:
    """Log-probabilities over every answer of the field; answers the row does not offer get the floor."""
    values = [math.log(ZERO_SHOT_FLOOR)] * label_count
    for index, p in zip(offered, probabilities):
        values[index] = math.log(max(p, ZERO_SHOT_FLOOR))
    return torch.tensor(values, dtype=torch.float32)


def rubric_fingerprint(rubric: Rubric) -> str:
    return hashlib.sha256(rubric.key.encode()).hexdigest()[:32]


def prompt_fingerprint(prefix_tokens: Sequence[int]) -> str:
    return hashlib.sha256(json.dumps(list(prefix_tokens)).encode()).hexdigest()[:32]


class Heads:
    """A rubric's fitted heads and their metadata; `for_field` gives the heads that answer."""

    def __init__(self, metadata: HeadsMetadata, heads: dict[str, FieldHead], path: Path | None = None,
                 fitted_on: torch.Tensor | None = None, *, ngram: dict[str, NgramHead] | None = None,
                 lexicon: Lexicon | None = None, input_mean: dict[str, FieldHead] | None = None):
        self.metadata = metadata
        self.heads = heads
        """Per field, its hidden-state head (a multinomial or ordinal head, or a fused head's hidden part)."""
        self.ngram = dict(ngram or {})
        """Per field, its n-gram head (an n-gram head alone, or a fused head's word part)."""
        self.lexicon = lexicon
        """The words every n-gram head reads (None when no field has one)."""
        self.input_mean = dict(input_mean or {})
        """Per field, its fused head's input-mean member (a linear head on the input's mean hidden state)."""
        self.path = path
        self.fitted_on = fitted_on
        """The sorted `input_hashes` of the rows the heads were fitted on (None: not recorded, as in files
        written before they were), so evaluating or calibrating on those rows can be warned about."""
        self.checked_for: set[Any] = set()
        """What these heads were already checked against (an engine's model and prepared rubric)."""

    @staticmethod
    def path_for(rubric_path: str | Path) -> Path:
        path = Path(rubric_path)
        return path.with_name(path.stem + ".heads.safetensors")

    @property
    def fitted_fields(self) -> list[str]:
        return [name for name in self.metadata.fields if self.for_field(name) is not None]

    @property
    def layers(self) -> tuple[int, ...]:
        """Every hidden layer some fitted head reads (the pass captures these)."""
        return self._read_layers(lambda info: info.layers if info.reads_hidden else ())

    @property
    def mean_layers(self) -> tuple[int, ...]:
        """Every layer whose mean over the input's positions some fitted head reads (the pass captures these)."""
        return self._read_layers(lambda info: info.mean_layers if info.reads_means else ())

    def _read_layers(self, of: Callable[[FieldHeadInfo], tuple[int, ...]]) -> tuple[int, ...]:
        """The layers `of` each fitted field's info, each once, in the fields' order."""
        return tuple(dict.fromkeys(layer for name in self.fitted_fields for layer in of(self.metadata.fields[name])))

    def words(self, payload: Any) -> torch.Tensor | None:
        """The input's word vector for the n-gram heads (None when no fitted field reads words)."""
        if self.lexicon is None or not any(self.metadata.fields[name].reads_words for name in self.fitted_fields):
            return None
        from .lexical import lexical_text

        return self.lexicon.vector(lexical_text(payload))

    def fitted_on_rows(self, payloads: Sequence[Any]) -> list[int]:
        """The positions of the `payloads` the heads were fitted on (empty when that was not recorded)."""
        if self.fitted_on is None or not len(payloads):
            return []
        hashes = input_hashes(payloads)
        found = torch.isin(hashes, self.fitted_on)
        return [int(i) for i in torch.nonzero(found).flatten()]

    def corrections(self) -> dict[str, str]:
        """Per fitted field, the readout correction its head was fitted under."""
        return {name: self.metadata.fields[name].debias for name in self.fitted_fields if self.metadata.fields[name].debias}

    def for_field(self, name: str) -> FieldReadout | None:
        """How `name` is answered when a head answers it (None: the zero-shot readout answers)."""
        info = self.metadata.fields.get(name)
        if info is None or info.readout != "fitted":
            return None
        hidden, ngram, input_mean = self.heads.get(name), self.ngram.get(name), self.input_mean.get(name)
        if ((info.reads_hidden and hidden is None) or (info.reads_words and (ngram is None or self.lexicon is None))
                or (info.reads_means and input_mean is None)):
            return None
        return FieldReadout(info, hidden, ngram, input_mean)

    # -- files --------------------------------------------------------------------------------

    @staticmethod
    def save_problem(path: str | Path) -> str | None:
        """Why `save(path)` would overwrite a file that is not a heads file: `path` itself, or the name
        its readable metadata copy takes (a data file, a rubric, `fit --json`'s own redirect); None when
        both are free or hold heads (a refit rewrites them)."""
        path = Path(path)
        copy = readable_copy(path)
        if path.is_dir():
            return f"{path} is a folder; give a file name (NAME.heads.safetensors)"
        if path.is_file() and not _holds_heads(path):
            return f"{path} exists and is not a heads file; give another path (saving would replace it)"
        if copy.is_dir():
            return f"{copy}, where the heads' readable metadata goes, is a folder; give another path"
        if copy.is_file() and not _holds_heads_metadata(copy):
            return (f"{copy}, where the heads' readable metadata goes beside {path.name}, holds another file; "
                    "give another path (saving would replace it)")
        return None

    def save(self, path: str | Path) -> Path:
        """Write the heads atomically; a readable copy of the metadata goes beside (`.json`). Refused
        (a `HeadsError`) where either would replace a file that is not a heads file (`save_problem`)."""
        from safetensors.torch import save

        path = Path(path)
        problem = self.save_problem(path)
        if problem:
            raise HeadsError(problem)
        path.parent.mkdir(parents=True, exist_ok=True)
        tensors = {}
        for prefix, linear in ((LINEAR_HEAD, self.heads), (INPUT_MEAN_HEAD, self.input_mean)):
            for name, head in linear.items():
                for part in LINEAR_PARTS:
                    tensors[f"{name}.{prefix}{part}"] = getattr(head, part).detach().float().contiguous().cpu()
        for name, head in self.ngram.items():
            tensors[f"{name}.ngram.weight"] = head.weight.detach().float().contiguous().cpu()
            tensors[f"{name}.ngram.bias"] = head.bias.detach().float().contiguous().cpu()
        header = {METADATA_KEY: self.metadata.model_dump_json()}
        if self.lexicon is not None:
            tensors[LEXICON_IDF] = self.lexicon.idf.detach().float().contiguous().cpu()
            header[LEXICON_KEY] = self.lexicon.to_json()
        if self.fitted_on is not None:
            tensors[FITTED_ON_KEY] = self.fitted_on.contiguous().cpu()
        write_atomically(path, save(tensors, metadata=header))
        readable_copy(path).write_text(self.metadata.model_dump_json(indent=2) + "\n", encoding="utf-8")
        self.path = path
        return path

    @classmethod
    def load(cls, path: str | Path) -> Heads:

        path = Path(path)
        (header, terms), tensors = read_saved_tensors(path, what="heads", keys=(METADATA_KEY, LEXICON_KEY), error=HeadsError,
                                                       writer="fit one with `decisionflow fit`",
                                                       damaged_hint="; fit one with `decisionflow fit`")
        try:
            metadata = HeadsMetadata.model_validate_json(header)
        except ValidationError as error:
            first = error.errors(include_url=False)[0]
            where = ".".join(map(str, first["loc"])) or "metadata"
            raise HeadsError(f"{path}: not a heads file ({where}: {first['msg']})") from None
        if metadata.format not in READ_FORMATS:
            raise HeadsError(f"{path}: heads format {metadata.format}, this decisionflow reads formats "
                             f"{', '.join(map(str, READ_FORMATS))}; fit again")
        lexicon = _lexicon(path, terms, tensors.get(LEXICON_IDF))
        heads, ngram, input_mean = {}, {}, {}
        for name, info in metadata.fields.items():
            if info.readout != "fitted":
                continue
            if info.head not in HEAD_KINDS:
                raise HeadsError(f"{path}: field {name!r}: unknown head {info.head!r} (this decisionflow reads "
                                 f"{', '.join(HEAD_KINDS)}); fit again")
            if info.reads_words:
                ngram[name] = _ngram_head(path, name, info, tensors, lexicon)
            if not info.reads_hidden:
                continue
            if info.head == "fused" and (info.fusion is None or len(info.fusion) != info.members
                                         or not all(math.isfinite(w) for w in info.fusion)):
                count = {3: "three", 4: "four"}[info.members]
                raise HeadsError(f"{path}: field {name!r}: a fused head without its {count} finite weights; fit again")
            heads[name] = _linear_head(path, name, LINEAR_HEAD, info, tensors)
            if info.reads_means:
                input_mean[name] = _linear_head(path, name, INPUT_MEAN_HEAD, info, tensors)
        fitted_on = tensors.get(FITTED_ON_KEY)
        if fitted_on is not None and (fitted_on.dtype != torch.int64 or fitted_on.ndim != 1):
            fitted_on = None  # a damaged record of the fitting rows only loses the overlap warning
        return cls(metadata, heads, path, fitted_on, ngram=ngram, lexicon=lexicon, input_mean=input_mean)

    # -- checks -------------------------------------------------------------------------------

    def check(
        self, rubric: Rubric, *, model: str, prompt: str, hidden_size: int | None = None, model_name: str = "", dtype: str = "",
        weights: str = "",
    ) -> None:
        """Refuse heads fitted for another model, rubric, prompt or option set, naming the mismatch. Heads
        fitted on the same weights in another of `INTERCHANGEABLE_DTYPES` apply (measured in docs/fitting.md)."""
        self.check_rubric(rubric)
        where = f"{self.path}: " if self.path is not None else ""
        meta = self.metadata
        other_format = bool(meta.dtype and dtype and meta.dtype != dtype)
        same_weights = bool(meta.weights) and meta.weights == weights
        if other_format and not (same_weights and {meta.dtype, dtype} <= INTERCHANGEABLE_DTYPES):
            raise HeadsError(f"{where}the heads were fitted with the model in {meta.dtype}; it is loaded here in {dtype}, "
                             f"whose weights and hidden states differ: load it with --dtype {meta.dtype}, or fit again")
        if meta.model != model and not (other_format and same_weights):
            fitted_on = f"{meta.model_name} ({meta.model[:12]})" if meta.model_name else meta.model[:12]
            this = f"{model_name} ({model[:12]})" if model_name else model[:12]
            raise HeadsError(f"{where}the heads were fitted on another model, {fitted_on}, not on the model loaded, "
                             f"{this}; fit again with this model")
        if meta.prompt != prompt:
            raise HeadsError(f"{where}the heads were fitted under another prompt (chat template, catalog or engine "
                             "options changed); fit again")
        if hidden_size is not None:
            for name in self.fitted_fields:
                if not meta.fields[name].reads_hidden:
                    continue
                head, info = self.heads[name], meta.fields[name]
                zero_shot = len(info.labels) if info.zero_shot_features else 0
                expected = hidden_size * len(info.layers) + zero_shot
                if head.feature_size != expected:
                    raise HeadsError(f"{where}the head of field {name!r} reads {head.feature_size} features; this model "
                                     f"gives {expected}; fit again")
                mean_head = self.input_mean.get(name)
                expected = hidden_size * len(info.mean_layers) + zero_shot
                if info.reads_means and mean_head is not None and mean_head.feature_size != expected:
                    raise HeadsError(f"{where}the input-mean head of field {name!r} reads {mean_head.feature_size} "
                                     f"features; this model gives {expected}; fit again")

    def check_rubric(self, rubric: Rubric) -> None:
        """The part of `check` that needs no model: refuse heads fitted for another rubric, another
        version of it or another option set (commands run it before the model loads)."""
        where = f"{self.path}: " if self.path is not None else ""
        meta = self.metadata
        if meta.rubric != rubric.name:
            raise HeadsError(f"{where}the heads are for rubric {meta.rubric!r}, not {rubric.name!r}")
        for name, info in meta.fields.items():
            spec = rubric.fields.get(name)
            if spec is None:
                raise HeadsError(f"{where}the heads have field {name!r}, which rubric {rubric.name!r} does not have "
                                 f"(fields: {', '.join(rubric.fields)})")
            if tuple(spec.labels) != info.labels:
                added = [label for label in spec.labels if label not in info.labels]
                gone = [label for label in info.labels if label not in spec.labels]
                change = "; ".join(part for part in (
                    f"the rubric adds {', '.join(added)}" if added else "",
                    f"the rubric no longer offers {', '.join(gone)}" if gone else "",
                ) if part) or "the rubric lists them in another order"
                raise HeadsError(f"{where}the head of field {name!r} was fitted for other answers ({change}); fit again")
        if meta.rubric_fingerprint != rubric_fingerprint(rubric):
            raise HeadsError(f"{where}the heads were fitted for another version of rubric {rubric.name!r} "
                             "(its questions, wording or settings changed); fit again")


LEXICON_IDF = "lexicon.idf"
LINEAR_PARTS = ("weight", "bias", "mean", "scale")
LINEAR_HEAD, INPUT_MEAN_HEAD = "", "input_mean."
"""How a field's linear heads' tensors are named: `NAME.weight` (the answer position's), `NAME.input_mean.weight`."""


def _linear_head(path: Path, name: str, prefix: str, info: FieldHeadInfo, tensors: dict[str, torch.Tensor]) -> FieldHead:
    """A field's linear head on hidden states (`prefix` LINEAR_HEAD: the answer position's; INPUT_MEAN_HEAD: the
    input's mean)."""
    what = "the input-mean head" if prefix == INPUT_MEAN_HEAD else "the head"
    try:
        parts = [tensors[f"{name}.{prefix}{part}"].float() for part in LINEAR_PARTS]
    except KeyError as missing:
        raise HeadsError(f"{path}: field {name!r} is marked fitted but its tensor {missing} is missing") from None
    weight, bias, mean, scale = parts
    if (weight.ndim != 2 or weight.shape[0] != len(info.labels) or bias.shape != (len(info.labels),)
            or mean.shape != (weight.shape[1],) or scale.shape != mean.shape):
        raise HeadsError(f"{path}: field {name!r}: {what}'s tensors do not fit its {len(info.labels)} answers")
    if not all(torch.isfinite(t).all() for t in parts) or bool((scale <= 0).any()):
        raise HeadsError(f"{path}: field {name!r}: {what} holds values that are not finite; fit again")
    return FieldHead(weight, bias, mean, scale)


def _lexicon(path: Path, terms: str | None, idf: torch.Tensor | None) -> Lexicon | None:
    if terms is None and idf is None:
        return None
    try:
        lexicon = Lexicon.from_json(terms or "", idf) if idf is not None else None
    except (ValueError, TypeError):
        lexicon = None
    if lexicon is None or idf.ndim != 1 or len(lexicon) != idf.shape[0] or not bool(torch.isfinite(idf).all()):
        raise HeadsError(f"{path}: the n-gram heads' lexicon is damaged (its terms and weights do not match); fit again")
    return lexicon


def _ngram_head(path: Path, name: str, info: FieldHeadInfo, tensors: dict[str, torch.Tensor],
                lexicon: Lexicon | None) -> NgramHead:
    try:
        weight, bias = (tensors[f"{name}.ngram.{part}"].float() for part in ("weight", "bias"))
    except KeyError as missing:
        raise HeadsError(f"{path}: field {name!r} reads the input's words but its tensor {missing} is missing") from None
    if lexicon is None:
        raise HeadsError(f"{path}: field {name!r} reads the input's words but the file holds no lexicon; fit again")
    if weight.shape != (len(info.labels), len(lexicon)) or bias.shape != (len(info.labels),):
        raise HeadsError(f"{path}: field {name!r}: the n-gram head's tensors do not fit its {len(info.labels)} answers "
                         f"and the lexicon's {len(lexicon)} terms")
    if not (torch.isfinite(weight).all() and torch.isfinite(bias).all()):
        raise HeadsError(f"{path}: field {name!r}: the n-gram head holds values that are not finite; fit again")
    return NgramHead(weight, bias)


def input_hashes(payloads: Sequence[Any]) -> torch.Tensor:
    """One int64 per input: the first 8 bytes of its BLAKE2b digest (a text as written, a structured
    input as sorted JSON), sorted or not as given. Recognises a row again without keeping its text."""
    digests = []
    for payload in payloads:
        data = payload if isinstance(payload, str) else json.dumps(payload, sort_keys=True, default=str)
        digest = hashlib.blake2b(data.encode("utf-8"), digest_size=8).digest()
        digests.append(int.from_bytes(digest, "little", signed=True))
    return torch.tensor(digests, dtype=torch.int64)


def _holds_heads(path: Path) -> bool:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            return METADATA_KEY in (handle.metadata() or {})
    except (SafetensorError, OSError, ValueError):
        return False


def _holds_heads_metadata(path: Path) -> bool:
    try:
        HeadsMetadata.model_validate_json(path.read_bytes())
    except (OSError, ValidationError):
        return False
    return True




def describe(info: FieldHeadInfo) -> dict[str, Any]:
    """A field's fit in one JSON-able dict (what `/v1/rubrics` and `fit --json` show)."""
    return {"readout": info.readout, "head": info.head if info.readout == "fitted" else None, "rows": info.rows,
            "candidates": {k: v.model_dump() for k, v in info.candidates.items()},
            **({"fusion": list(info.fusion)} if info.fusion else {}),
            **({"mean_layers": list(info.mean_layers)} if info.mean_layers else {}), **({"why": info.why} if info.why else {})}
