"""RULER's scoring (eval/synthetic/constants.py and evaluate.py's postprocess_pred)."""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x1f]")


def postprocess(prediction: str) -> str:
    """Control characters to newlines, outer whitespace stripped."""
    return _CONTROL.sub("\n", prediction.strip()).strip()


def string_match_all(prediction: str, answers: list[str]) -> float:
    """0..100: the share of the answers found in the prediction (case-insensitive)."""
    pred = postprocess(prediction).lower()
    return 100.0 * sum(a.lower() in pred for a in answers) / len(answers)


def string_match_part(prediction: str, answers: list[str]) -> float:
    """0 or 100: whether any answer is found in the prediction (RULER's QA metric)."""
    pred = postprocess(prediction).lower()
    return 100.0 * max(a.lower() in pred for a in answers)


METRICS = {"all": string_match_all, "part": string_match_part}
