# The course's two commands. Both create .venv from requirements.txt on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# Jupyter refuses to start as root without this flag (containers, CI machines).
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)
LAB_ARGS ?=

.PHONY: lab test clean-venv

$(STAMP): requirements.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q -r requirements.txt
	@touch $(STAMP)

# Serve the whole repository (lectures, exercises, solutions in the file browser) and open the
# start page; giving jupyter a notebook path instead would hide every folder but notebooks/.
lab: $(STAMP)
	$(VENV)/bin/jupyter lab $(ROOT_FLAG) --ServerApp.root_dir="$(CURDIR)" \
		--LabApp.default_url=/lab/tree/notebooks/00_start_here.ipynb $(LAB_ARGS)

test: $(STAMP)
	$(PY) -m pytest -n 2 --dist loadfile --nbval-lax --nbval-current-env --nbval-cell-timeout=300 --timeout=900 --durations=15

clean-venv:
	rm -rf $(VENV)
