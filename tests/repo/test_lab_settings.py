"""`make lab` must not greet every learner with JupyterLab's "official Jupyter news?" prompt.

The course ships JupyterLab defaults in jupyter/overrides.json; the Makefile copies them where
JupyterLab reads an installation's overrides. The test asks jupyterlab_server itself what the
notification settings resolve to, so it fails if the file is missing, misplaced or misspelt.
"""

import json
from pathlib import Path

from jupyterlab.commands import get_app_dir
from jupyterlab_server.settings_utils import _get_overrides, get_settings

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = "@jupyterlab/apputils-extension:notification"


def test_shipped_overrides_turn_off_the_news_prompt():
    app_dir = Path(get_app_dir())
    installed = app_dir / "settings" / "overrides.json"
    assert installed.is_file(), f"{installed} is missing: the Makefile's set-up copies jupyter/overrides.json there"
    shipped = json.loads((ROOT / "jupyter" / "overrides.json").read_text())
    assert json.loads(installed.read_text()) == shipped, f"{installed} differs from jupyter/overrides.json"
    empty_user_dir = ROOT / "tests" / "repo"  # holds no JupyterLab user settings
    # what the server does for each request: read the installation's overrides, apply them to the schema's defaults
    overrides, _error = _get_overrides(str(app_dir / "settings"))
    settings, _warnings = get_settings(
        str(app_dir / "settings"), str(app_dir / "schemas"), str(empty_user_dir), PLUGIN, overrides
    )
    defaults = {name: spec.get("default") for name, spec in settings["schema"]["properties"].items()}
    # "none" (the schema's own default) is what makes JupyterLab ask; "false" answers it for the learner
    assert defaults["fetchNews"] == "false", defaults
    assert defaults["checkForUpdates"] is False, defaults
