"""The judge: model-graded assertions ask a target for a verdict, and the verdict is read strictly.

``judge.py`` grades (one :class:`Judge` a run), ``prompts.py`` says what a judge is asked,
``verdict.py`` reads the reply, ``checks.py`` checks references and self-grading up front.
"""

from __future__ import annotations

from evalx.judge.checks import check_judge_refs, graded_target_ids
from evalx.judge.judge import Judge
from evalx.judge.prompts import JUDGE_PROMPT_NAMES

__all__ = ["JUDGE_PROMPT_NAMES", "Judge", "check_judge_refs", "graded_target_ids"]
