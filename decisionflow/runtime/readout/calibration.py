"""Per-field calibration and abstention, applied to a field's distribution after the readout.

The model's probabilities are its belief renormalised over the allowed answers, not calibrated
frequencies. A per-field temperature fitted on labelled data (`decisionflow calibrate`) rescales
them without ever changing the winning answer; a minimum candidate mass and/or minimum probability
makes the field abstain (come back as `None`, marked abstained) instead of guessing.

A rubric's calibration lives in a small JSON file beside it: `triage.yaml` -> `triage.calibration.json`.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ...errors import CalibrationError
from ...spec.rubric import Debias, Rubric
from ...stats.calibration import temperature_scale


class FieldCalibration(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float = Field(default=1.0, gt=0)
    min_candidate_mass: float | None = Field(default=None, ge=0, le=1)
    min_probability: float | None = Field(default=None, ge=0, le=1)
    labels: tuple[str, ...] | None = None
    """The field's labels when it was fitted; a rubric whose field offers other labels is refused."""
    prior: tuple[float, ...] | None = None
    """A domain prior over `labels` (mean distribution over unlabelled in-domain inputs) to divide by."""
    debias: Debias | None = None
    """The readout correction the temperature and thresholds were fitted under: the engine applies it to
    this field unless the call names another (None: not recorded; the field's usual correction applies)."""
    after_head: bool = False
    """The temperature and thresholds were fitted on a fitted head's distribution (`decisionflow fit`)."""

    @model_validator(mode="after")
    def _prior_has_labels(self) -> FieldCalibration:
        if self.prior is not None and (self.labels is None or len(self.labels) != len(self.prior)):
            raise ValueError("a prior needs `labels` of the same length, in the same order")
        if self.debias is Debias.DOMAIN and self.prior is None:
            raise ValueError("`debias: domain` needs a `prior` (fit one with `decisionflow calibrate --unlabelled`)")
        return self


class Calibration(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    rubric: str
    fields: dict[str, FieldCalibration] = {}

    @staticmethod
    def path_for(rubric_path: str | Path) -> Path:
        path = Path(rubric_path)
        return path.with_name(path.stem + ".calibration.json")

    def without_heads(self) -> Calibration:
        """What of this calibration applies where no head answers: a temperature and probability
        threshold fitted on a head's distribution are dropped; the prior, the correction and the
        candidate-mass threshold, which read the zero-shot readout either way, stay."""
        return self.model_copy(update={"fields": {
            name: settings.model_copy(update={"temperature": 1.0, "min_probability": None, "after_head": False})
            if settings.after_head else settings
            for name, settings in self.fields.items()
        }})

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        try:
            return cls.model_validate_json(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as error:
            raise CalibrationError(f"{path}: cannot read the calibration file: {error}") from None
        except ValidationError as error:
            first = error.errors(include_url=False)[0]
            where = ".".join(map(str, first["loc"])) or "file"
            raise CalibrationError(f"{path}: not a calibration file ({where}: {first['msg']})") from None

    def check(self, rubric: Rubric) -> None:
        """Refuse to apply this calibration to a rubric it was not fitted for (name, fields, labels)."""
        if self.rubric != rubric.name:
            raise CalibrationError(f"the calibration is for rubric {self.rubric!r}, not {rubric.name!r}")
        for name, settings in self.fields.items():
            spec = rubric.fields.get(name)
            if spec is None:
                raise CalibrationError(
                    f"the calibration has settings for field {name!r}, which rubric {rubric.name!r} does not have "
                    f"(fields: {', '.join(rubric.fields)})"
                )
            if spec.derive is not None:
                raise CalibrationError(
                    f"the calibration has settings for field {name!r}, which rubric {rubric.name!r} derives from "
                    f"{', '.join(spec.derive.reads)} instead of reading it from the model, so they would never apply"
                )
            if settings.labels is not None and set(settings.labels) != set(spec.labels):
                raise CalibrationError(
                    f"the calibration of field {name!r} was fitted for labels {', '.join(settings.labels)}; "
                    f"the rubric's field offers {', '.join(spec.labels)}"
                )

    def check_readouts(self, fitted_fields: Collection[str]) -> None:
        """Refuse a field's temperature or probability threshold fitted on another readout than the one
        that answers it here: fitted on a head's distribution and applied to the zero-shot one (heads
        not applied), or the reverse. The two distributions differ in shape, so the settings would
        rescale and cut the wrong one. A candidate-mass threshold reads the same mass either way."""
        for name, settings in self.fields.items():
            if settings.temperature == 1.0 and settings.min_probability is None:
                continue
            answered_by_head = name in fitted_fields
            if settings.after_head != answered_by_head:
                fitted_on, answered = (("its fitted head's", "zero-shot (no heads apply)") if settings.after_head
                                       else ("its zero-shot", "by a fitted head"))
                raise CalibrationError(
                    f"the calibration of field {name!r} was fitted on {fitted_on} distribution, but here the field "
                    f"is answered {answered}: calibrate again with the heads this command applies, or apply the "
                    f"heads it was fitted with"
                )

    @staticmethod
    def save_problem(path: str | Path) -> str | None:
        """Why `save(path)` would overwrite a file that is not a calibration (a data file, a rubric); None
        when the path is free or holds a calibration (of any rubric: a refit rewrites it)."""
        path = Path(path)
        if not path.is_file():
            return None
        try:
            Calibration.load(path)
        except CalibrationError:
            return f"{path} exists and is not a calibration file; give another path (saving would replace it)"
        return None

    def save(self, path: str | Path) -> None:
        """Write the calibration as JSON; a `CalibrationError` where that would replace another file (`save_problem`)."""
        if problem := self.save_problem(path):
            raise CalibrationError(problem)
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(self.model_dump_json(indent=2) + "\n", encoding="utf-8")

    def priors(self, rubric: Rubric) -> dict[str, tuple[float, ...]]:
        """The domain priors this calibration holds, each in the order of the rubric field's labels."""
        found = {}
        for name, settings in self.fields.items():
            if settings.prior is None or settings.labels is None or name not in rubric.fields:
                continue
            by_label = dict(zip(settings.labels, settings.prior))
            found[name] = tuple(by_label[label] for label in rubric.fields[name].labels)
        return found

    def corrections(self) -> dict[str, Debias]:
        """Per field, the readout correction its settings were fitted under, where the file records one."""
        return {name: settings.debias for name, settings in self.fields.items() if settings.debias is not None}

    def apply(self, field: str, probabilities: tuple[float, ...], candidate_mass: float) -> tuple[tuple[float, ...], bool]:
        """The field's calibrated distribution and whether it abstains."""
        settings = self.fields.get(field)
        if settings is None:
            return probabilities, False
        scaled = temperature_scale(probabilities, settings.temperature)
        abstain = (
            settings.min_candidate_mass is not None and candidate_mass < settings.min_candidate_mass
        ) or (settings.min_probability is not None and max(scaled) < settings.min_probability)
        return scaled, abstain
