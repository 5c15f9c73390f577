"""RULER's synthetic task family (Hsieh et al., 2024), generated here with the GGUF's own tokenizer.

The 13 tasks RULER averages, with its templates, answer prefixes, parameters and metrics
(tasks.py); the essay haystack is the project's held-out prose (RULER's Paul Graham essays
and its two QA sets do not install offline, so qa_1 and qa_2 are missing and every average
here is over the 11 synthetic tasks). Every item is a token array assembled from separately
tokenized pieces, so the rows of everything an answer depends on (its evidence) are exact,
and an item is sized to a target length as RULER sizes it: the largest haystack whose
prompt plus the task's generation budget fits.
"""

from .item import RulerItem
from .tasks import MISSING, TASKS, generate

__all__ = ["MISSING", "TASKS", "RulerItem", "generate"]
