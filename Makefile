# The course's two commands. Both create .venv from requirements.txt on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# Jupyter refuses to start as root without this flag (containers, CI machines).
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)
LAB_ARGS ?=

NBGRADER_VENV := .venv-nbgrader
NBGRADER_STAMP := $(NBGRADER_VENV)/.installed-stamp

SITE_VENV := .venv-site
SITE_STAMP := $(SITE_VENV)/.installed-stamp
SITE_SRC := _build/src
SITE_HTML := _build/html
# The pages screenshotted by `make site` (kept in _build/screenshots as build artefacts).
SITE_SHOTS := index.html notebooks/03_scaled_dot_product_attention.html exercises/a03_attention.html

.PHONY: lab test test-fast lint format sandbox nbgrader nbgrader-course nbgrader-generate nbgrader-autograde gpu-check clean-venv site site-env browser

# JupyterLab reads $(VENV)/share/jupyter/lab/settings/overrides.json as the defaults of this installation:
# ours turns off the "official Jupyter news?" prompt (the course needs no network) without touching the learner's own settings.
LAB_OVERRIDES := $(VENV)/share/jupyter/lab/settings/overrides.json

$(STAMP): requirements.txt pyproject.toml jupyter/overrides.json
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "the course needs Python 3.11 or newer (torch 2.13 and numpy 2.4 do); $(PYTHON) is " + sys.version.split()[0] + ": run make PYTHON=python3.11 ...")'
	@# a .venv left by a failed first run, or made by an older Python, is made again
	@test -x $(PY) && $(PY) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { rm -rf $(VENV); $(PYTHON) -m venv $(VENV); }
	$(PY) -m pip install --disable-pip-version-check -q -r requirements.txt
	@mkdir -p $(dir $(LAB_OVERRIDES)) && cp jupyter/overrides.json $(LAB_OVERRIDES)
	@touch $(STAMP)

# Serve the whole repository (lectures, exercises, solutions in the file browser) and open the
# start page; giving jupyter a notebook path instead would hide every folder but notebooks/.
lab: $(STAMP)
	$(VENV)/bin/jupyter lab $(ROOT_FLAG) --ServerApp.root_dir="$(CURDIR)" \
		--LabApp.default_url=/lab/tree/notebooks/00_start_here.ipynb $(LAB_ARGS)

# The grader isolates each submission with bubblewrap (Debian/Ubuntu package `bubblewrap`).
# As root with apt-get it is installed here; otherwise this says how, and the tests that need it are skipped.
sandbox:
	@if command -v bwrap >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing bubblewrap (the grader's sandbox)"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null) \
			|| echo "WARNING: could not install bubblewrap; the grader's isolation tests will be skipped"; \
	else \
		echo "NOTE: bubblewrap (bwrap) is not installed: the grader refuses to grade without it and its isolation"; \
		echo "      tests are skipped. Install it: sudo apt-get install bubblewrap (Debian/Ubuntu), sudo dnf install bubblewrap (Fedora)."; \
	fi

# nbgrader (for the interop test) in an environment of its own that sees .venv's packages through a
# .pth file: only what nbgrader adds is installed, and the learner's .venv stays free of its extensions.
$(NBGRADER_STAMP): requirements-nbgrader.txt $(STAMP) Makefile
	@test -x $(NBGRADER_VENV)/bin/python || $(PY) -m venv $(NBGRADER_VENV)
	@# site.addsitedir, not a bare path: .venv's own .pth files (the editable install of mha_course) must run too
	$(PY) -c 'import sysconfig; print("import site; site.addsitedir(%r)" % sysconfig.get_paths()["purelib"])' > \
		"$$($(NBGRADER_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_course_venv.pth"
	$(NBGRADER_VENV)/bin/python -m pip install --disable-pip-version-check -q -r requirements-nbgrader.txt
	@touch $(NBGRADER_STAMP)

nbgrader: $(NBGRADER_STAMP)

# The nbgrader route (docs/INSTRUCTORS.md, "nbgrader"), in nbgrader's own course folder NBGRADER_COURSE:
#   make nbgrader-generate ASSIGNMENT=a02_softmax   solutions/ -> source/, then release/ACCOUNT/ for students
#   make nbgrader-autograde ASSIGNMENT=a02_softmax  submitted/STUDENT/ASSIGNMENT/ -> autograded/, grades.csv
# nbgrader runs `alembic` (its gradebook's migrations) by name: the environment's bin/ goes first on PATH,
# so the commands work without activating it.
NBGRADER_COURSE ?= _build/nbgrader
ASSIGNMENT ?=
NBGRADER_RUN = cd "$(NBGRADER_COURSE)" && PATH="$(abspath $(NBGRADER_VENV))/bin:$$PATH" "$(abspath $(NBGRADER_VENV))/bin/nbgrader"

nbgrader-course: $(NBGRADER_STAMP)
	@test -n "$(ASSIGNMENT)" || { echo "name the assignment: make $(MAKECMDGOALS) ASSIGNMENT=a02_softmax"; exit 2; }
	@test -f "solutions/$(ASSIGNMENT).ipynb" || { echo "no solutions/$(ASSIGNMENT).ipynb"; exit 2; }
	@mkdir -p "$(NBGRADER_COURSE)/source/$(ASSIGNMENT)"
	cp "solutions/$(ASSIGNMENT).ipynb" "$(NBGRADER_COURSE)/source/$(ASSIGNMENT)/"
	@test -f "$(NBGRADER_COURSE)/nbgrader_config.py" || printf '%s\n' 'c = get_config()' \
		'c.CourseDirectory.course_id = "mha_course"' \
		'c.CourseDirectory.db_url = "sqlite:///$(abspath $(NBGRADER_COURSE))/gradebook.db"' \
		> "$(NBGRADER_COURSE)/nbgrader_config.py"

nbgrader-generate: nbgrader-course
	$(NBGRADER_RUN) generate_assignment "$(ASSIGNMENT)" --force
	@echo "release notebooks for students: $(NBGRADER_COURSE)/release/$(ASSIGNMENT)/"

nbgrader-autograde: nbgrader-course
	@ls "$(NBGRADER_COURSE)"/submitted/*/"$(ASSIGNMENT)"/*.ipynb >/dev/null 2>&1 || \
		{ echo "no submissions: put each student's notebook in $(NBGRADER_COURSE)/submitted/STUDENT/$(ASSIGNMENT)/ (nbgrader collect does)"; exit 2; }
	$(NBGRADER_RUN) autograde "$(ASSIGNMENT)" --force --create
	$(NBGRADER_RUN) export --to grades.csv
	@echo "autograded notebooks: $(NBGRADER_COURSE)/autograded/; nbgrader's gradebook: $(NBGRADER_COURSE)/grades.csv"

# The website's tools (requirements-site.txt) in an environment of their own that sees .venv's packages,
# like .venv-nbgrader: Sphinx and Playwright stay out of the learner's .venv.
$(SITE_STAMP): requirements-site.txt $(STAMP) Makefile
	@test -x $(SITE_VENV)/bin/python || $(PY) -m venv $(SITE_VENV)
	$(PY) -c 'import sysconfig; print("import site; site.addsitedir(%r)" % sysconfig.get_paths()["purelib"])' > \
		"$$($(SITE_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_course_venv.pth"
	$(SITE_VENV)/bin/python -m pip install --disable-pip-version-check -q -r requirements-site.txt
	@touch $(SITE_STAMP)

site-env: $(SITE_STAMP)

# The browser test opens the site in Debian's `chromium` (Playwright drives it; it downloads no browser).
# As root with apt-get it is installed here; otherwise this says how, and the browser test is skipped.
browser:
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing chromium (the website's browser test)"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
			|| echo "WARNING: could not install chromium; the website's browser test will be skipped"; \
	else \
		echo "NOTE: chromium is not installed: the website's browser test is skipped. Install it:"; \
		echo "      sudo apt-get install chromium (Debian/Ubuntu), sudo dnf install chromium (Fedora)."; \
	fi

# The course as a website in _build/html (index.html at its root): every chapter executed (cached in
# _build/.jupyter_cache: a rebuild re-runs only the chapters whose code changed), the exercises, the
# library reference. Then, where Chromium is installed, every page is opened in it and checked.
site: $(SITE_STAMP)
	$(SITE_VENV)/bin/python site/prepare.py $(SITE_SRC)
	$(SITE_VENV)/bin/python -m sphinx -b html -c site -d _build/doctrees $(SITE_SRC) $(SITE_HTML)
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then \
		$(SITE_VENV)/bin/python site/browser_check.py $(SITE_HTML) --json _build/browser-report.json \
			--screenshots _build/screenshots --shots $(SITE_SHOTS); \
	else echo "NOTE: chromium is not installed, so the built pages were not checked in a browser (make browser)"; fi

# Style: ruff's lint rules and its formatter (pyproject.toml [tool.ruff]), then mypy on the grader and the
# kernels (pyproject.toml [tool.mypy]; its cache in .venv: about 40 s cold on 2 cores, 5 s warm);
# `make test` runs it before the tests. `make format` lays the code out as the check expects.
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

format: $(STAMP)
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

test: $(STAMP) sandbox browser $(NBGRADER_STAMP) $(SITE_STAMP) lint
	MHA_COURSE_REQUIRE_NBGRADER=1 MHA_COURSE_REQUIRE_SITE=1 $(PY) -m pytest -n 2 --dist loadfile --nbval-lax --nbval-current-env --nbval-cell-timeout=300 --timeout=900 --durations=15

# The quick loop: lint, then every test not marked slow (no sandbox, notebook kernel or process; none over 2 s).
# An unmarked test that starts a process fails it; one over 2 s is listed at the end (MHA_COURSE_FAST_LIMIT_S).
test-fast: $(STAMP) lint
	$(PY) -m pytest -n 2 --dist loadfile -m "not slow" --timeout=300 --durations=10

# On a machine with an NVIDIA GPU: CUDA tests, GPU benchmark, compile report, recorded in benchmarks/RESULTS.md.
gpu-check: $(STAMP)
	$(PY) benchmarks/gpu_check.py

clean-venv:
	rm -rf $(VENV) $(NBGRADER_VENV) $(SITE_VENV)
