"""The load test's verdict on an answer: the same as read alone, its own answer moved by bfloat16's
rounding (what shares a pass), or another text's answer (a mix-up, the failure it exists to catch)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("load_test_serve", ROOT / "scripts" / "load_test_serve.py")
load_test = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(load_test)

PATH = "/v1/rubrics/sentiment/decide"
ALONE = {
    (PATH, 0): {"sentiment": ("positive", {"negative": 0.49, "positive": 0.51})},
    (PATH, 1): {"sentiment": ("negative", {"negative": 0.80, "positive": 0.20})},
    (PATH, 2): {"sentiment": ("positive", {"negative": 0.10, "positive": 0.90})},
}


def test_an_answer_equal_to_its_own_within_float32_noise_is_the_same():
    got = {"sentiment": ("positive", {"negative": 0.49003, "positive": 0.50997})}
    assert load_test.judge(got, PATH, 0, ALONE)[0] == "same"


def test_a_near_tie_flipped_by_rounding_is_its_own_answer_moved():
    got = {"sentiment": ("negative", {"negative": 0.52, "positive": 0.48})}
    verdict, distance = load_test.judge(got, PATH, 0, ALONE)
    assert verdict == "moved" and abs(distance - 0.03) < 1e-9


def test_another_texts_answer_is_a_mix_up():
    assert load_test.judge(ALONE[(PATH, 2)], PATH, 1, ALONE)[0] == "mix-up"
    assert load_test.judge(ALONE[(PATH, 1)], PATH, 0, ALONE)[0] == "mix-up"


def test_a_missing_field_or_an_unexplained_label_is_infinitely_far():
    assert load_test.gap({}, ALONE[(PATH, 0)]) == float("inf")
    assert load_test.gap({"q": ("a", None, None, None)}, {"q": ("b", None, None, None)}) == float("inf")
