"""Per-field calibration and abstention, applied to a field's distribution after the readout.

The model's probabilities are its belief renormalised over the allowed answers, not calibrated
frequencies. A per-field temperature fitted on labelled data (`decisionflow calibrate`) rescales
them without ever changing the winning answer; a minimum candidate mass and/or minimum probability
makes the field abstain (come back as `None`, marked abstained) instead of guessing.

A rubric's calibration lives in a small JSON file beside it: `triage.yaml` -> `triage.calibration.json`.
"""

from __future__ import annotations

import math
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class FieldCalibration(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float = Field(default=1.0, gt=0)
    min_candidate_mass: float | None = Field(default=None, ge=0, le=1)
    min_probability: float | None = Field(default=None, ge=0, le=1)


class Calibration(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    rubric: str
    fields: dict[str, FieldCalibration] = {}

    @staticmethod
    def path_for(rubric_path: str | Path) -> Path:
        path = Path(rubric_path)
        return path.with_name(path.stem + ".calibration.json")

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        return cls.model_validate_json(Path(path).read_text(encoding="utf-8"))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.model_dump_json(indent=2) + "\n", encoding="utf-8")

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


def temperature_scale(probabilities: tuple[float, ...], temperature: float) -> tuple[float, ...]:
    """p_i^(1/T), renormalised: the order of the answers (and so the winner) never changes."""
    if temperature == 1.0:
        return probabilities
    logs = [math.log(max(p, 1e-300)) / temperature for p in probabilities]
    top = max(logs)
    weights = [math.exp(x - top) for x in logs]
    total = sum(weights)
    return tuple(w / total for w in weights)
