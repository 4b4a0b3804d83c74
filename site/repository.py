"""Which GitHub repository the website's launch links (Colab, Binder, GitHub, ``pip install git+``) point to.

The first of: the environment variable ``COURSE_REPOSITORY_URL`` (the site's workflow sets it to
the repository it runs in; ``none`` asks for no repository), ``repository_url`` in
``site/site.toml``, and the checkout's ``git remote get-url origin``. Each is normalised to
``https://github.com/OWNER/NAME``. Launch links need GitHub (Colab and mybinder.org open GitHub
repositories), so an origin elsewhere, or no origin at all, gives ``None``: a site without launch
links, never one whose links point to a repository that is not this course's.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

ENV = "COURSE_REPOSITORY_URL"
NONE = "none"  # COURSE_REPOSITORY_URL=none: build without launch links even where a remote exists

_NAME = r"[A-Za-z0-9_.-]+"
# https://github.com/O/N(.git), http(s)://user:token@github.com/O/N, ssh://git@github.com/O/N.git,
# git://github.com/O/N.git, and scp-like git@github.com:O/N.git
_GITHUB = [
    re.compile(rf"^(?:https?|ssh|git)://(?:[^@/]+@)?github\.com(?::\d+)?/(?P<owner>{_NAME})/(?P<name>{_NAME}?)/?$"),
    re.compile(rf"^(?:[^@/]+@)?github\.com:(?P<owner>{_NAME})/(?P<name>{_NAME}?)/?$"),
]


def github_url(remote: str) -> str | None:
    """``https://github.com/OWNER/NAME`` for a GitHub remote in any of git's spellings; None for any other host.

    Credentials in the remote (``https://user:token@github.com/...``) are dropped.

    Raises:
        TypeError: ``remote`` is not a string.
    """
    if not isinstance(remote, str):
        raise TypeError(f"remote must be a str, got {type(remote).__name__}")
    remote = remote.strip()
    for pattern in _GITHUB:
        match = pattern.match(remote)
        if match:
            name = match.group("name").removesuffix(".git")
            if not name or match.group("owner") in {".", ".."} or name in {".", ".."}:
                return None
            return f"https://github.com/{match.group('owner')}/{name}"
    return None


def git_origin(root: Path) -> str | None:
    """The checkout's ``git remote get-url origin``; None where there is no git, no repository or no origin."""
    try:
        run = subprocess.run(
            ["git", "-C", str(root), "remote", "get-url", "origin"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if run.returncode != 0:
        return None
    return run.stdout.strip() or None


def course_repository(environ: Mapping[str, str], settings: Mapping[str, object], origin: str | None) -> str | None:
    """The repository the launch links point to (``https://github.com/OWNER/NAME``), or None for no launch links.

    Args:
        environ: the environment (``COURSE_REPOSITORY_URL``, when set and not empty, decides).
        settings: ``site/site.toml`` (its ``repository_url``, when set and not empty, decides next).
        origin: the checkout's git origin (``git_origin``), used when neither of the above names one.

    Raises:
        ValueError: the environment or site.toml names a repository that is not on GitHub (a mistake
            to report, not to build around: the workflow or the maintainer asked for it).
    """
    for where, value in ((ENV, environ.get(ENV)), ("site.toml repository_url", settings.get("repository_url"))):
        if value is None or (isinstance(value, str) and not value.strip()):
            continue
        if not isinstance(value, str):
            raise ValueError(f"{where} must be a string, got {value!r}")
        if value.strip().lower() == NONE:
            return None
        url = github_url(value)
        if url is None:
            raise ValueError(f"{where} must name a GitHub repository (https://github.com/OWNER/NAME), got {value!r}")
        return url
    return github_url(origin) if origin else None
