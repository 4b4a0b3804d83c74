"""The corpus's notebooks are data for tests/grading/honest/test_honest_corpus.py (which runs them as Jupyter does
and grades them), not notebooks for nbval: `make test` would otherwise run all sixty a second time."""

collect_ignore_glob = ["*.ipynb"]
