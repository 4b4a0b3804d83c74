"""What the learner sees: check() in the notebook, hints, errors turned into advice."""
