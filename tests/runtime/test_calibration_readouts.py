"""A calibration's temperature and probability threshold belong to the readout they were fitted on:
`Calibration.check_readouts` refuses them on the other (the engine, the CLI and the server call it)."""

from __future__ import annotations

import pytest

from decisionflow.errors import CalibrationError, RubricError
from decisionflow.runtime.readout.calibration import Calibration, FieldCalibration


def calibration(**settings: FieldCalibration) -> Calibration:
    return Calibration(rubric="review", fields=settings)


def test_settings_fitted_after_a_head_need_that_head():
    after_head = calibration(code=FieldCalibration(temperature=1.7, after_head=True))
    after_head.check_readouts(["code"])
    with pytest.raises(CalibrationError, match="field 'code' was fitted on its fitted head's distribution, but here "
                                               r"the field is answered zero-shot \(no heads apply\)"):
        after_head.check_readouts([])


def test_settings_fitted_zero_shot_are_refused_where_a_head_answers():
    zero_shot = calibration(code=FieldCalibration(min_probability=0.6), other=FieldCalibration(temperature=1.2))
    zero_shot.check_readouts([])
    zero_shot.check_readouts(["elsewhere"])
    with pytest.raises(CalibrationError, match="field 'code' was fitted on its zero-shot distribution, but here the "
                                               "field is answered by a fitted head"):
        zero_shot.check_readouts(["code"])


def test_a_candidate_mass_threshold_reads_the_same_mass_under_either_readout():
    calibration(code=FieldCalibration(min_candidate_mass=0.3, after_head=True)).check_readouts([])
    calibration(code=FieldCalibration(min_candidate_mass=0.3)).check_readouts(["code"])


def test_the_server_refuses_a_calibration_for_another_readout_at_startup(tmp_path):
    from decisionflow.serve.registry import RubricRegistry

    (tmp_path / "review.yaml").write_text(
        "name: review\ninstructions: Classify one sentence.\nfields:\n  code:\n    kind: choice\n"
        "    question: Which code the sentence gets\n    options: [k1, k2]\n", encoding="utf-8")
    calibration(code=FieldCalibration(temperature=2.0, labels=("k1", "k2"), after_head=True)).save(
        Calibration.path_for(tmp_path / "review.yaml"))
    with pytest.raises(RubricError) as refused:
        RubricRegistry.from_folder(tmp_path)
    [problem] = refused.value.problems
    assert problem.source == str(tmp_path / "review.calibration.json")
    assert "was fitted on its fitted head's distribution" in problem.message


def test_without_heads_keeps_what_reads_the_zero_shot_readout():
    from decisionflow.runtime.readout.calibration import Calibration, FieldCalibration

    headed = FieldCalibration(temperature=0.4, min_probability=0.6, min_candidate_mass=0.2, labels=("k1", "k2"),
                              prior=(0.3, 0.7), debias="domain", after_head=True)
    plain = FieldCalibration(temperature=2.0, min_probability=0.5, labels=("a", "b"))
    stripped = Calibration(rubric="r", fields={"code": headed, "other": plain}).without_heads()
    code = stripped.fields["code"]
    assert (code.temperature, code.min_probability, code.after_head) == (1.0, None, False)
    assert (code.min_candidate_mass, code.prior, code.debias, code.labels) == (0.2, (0.3, 0.7), headed.debias, ("k1", "k2"))
    assert stripped.fields["other"] == plain
    stripped.check_readouts([])  # applies where no head answers
