"""``testing.prediction``, the older "Check yourself" helper that falls back to the course's answer.

The rule every chapter follows now (predictions start as None, answers in one collapsed cell at
the end) is ``mha_course.predict``'s, enforced by ``test_answers_rule.py``; this helper stays
only until no chapter calls it.
"""

from __future__ import annotations

from mha_course.testing import prediction


def test_prediction_falls_back_only_while_the_learner_has_not_answered(capsys):
    assert prediction(..., 8, "D") == 8 and "no prediction yet" in capsys.readouterr().out
    assert prediction(7, 8, "D") == 7 and capsys.readouterr().out == ""
