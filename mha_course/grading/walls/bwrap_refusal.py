"""Why bubblewrap cannot build its namespaces here, in one sentence an instructor can act on.

:func:`explain` turns :func:`~mha_course.grading.walls.bubblewrap.probe`'s sentence into the reason tier A
is refused: bwrap's own words (:func:`bwrap_cause`, never its advice about containers) and, where bwrap
is installed, the cause read from what this process can see (:func:`namespace_cause`): its seccomp
mode and capabilities, the kernel's user namespace switches, and masked /proc paths (a fresh /proc
cannot be mounted beside them).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

CAP_SYS_ADMIN = 21


def _status() -> dict[str, str]:
    with contextlib.suppress(OSError):
        return dict(
            line.split(":\t", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":\t" in line
        )
    return {}


def _read(path: str) -> str | None:
    with contextlib.suppress(OSError):
        return Path(path).read_text().strip()
    return None


def namespace_cause(bwrap_said: str) -> str:
    """Why bubblewrap cannot build its namespaces here, from what this process sees (one sentence)."""
    status = _status()
    seccomp = status.get("Seccomp", "0").strip() == "2"
    admin = bool(int(status.get("CapEff", "0"), 16) >> CAP_SYS_ADMIN & 1)
    masked = any(
        line.split()[4].startswith(("/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sys", "/proc/acpi"))
        for line in (_read("/proc/self/mountinfo") or "").splitlines()
    )
    if "mount proc" in bwrap_said and masked:
        return (
            "a fresh /proc cannot be mounted beside the container's masked /proc paths (Docker masks /proc/kcore, "
            "/proc/keys, ...; the kernel then refuses a new proc mount)"
        )
    if seccomp and not admin:
        return (
            "user namespaces refused by seccomp (Docker's default profile refuses unshare/clone with namespace flags "
            "to a process without CAP_SYS_ADMIN)"
        )
    if _read("/proc/sys/user/max_user_namespaces") == "0":
        return "user namespaces are switched off (/proc/sys/user/max_user_namespaces is 0)"
    if _read("/proc/sys/kernel/unprivileged_userns_clone") == "0":
        return "unprivileged user namespaces are switched off (kernel.unprivileged_userns_clone = 0)"
    if _read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1":
        return "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns = 1)"
    return f"bubblewrap could not build its namespaces ({bwrap_said})"


def bwrap_cause(probe_text: str) -> str:
    """The part of :func:`~mha_course.grading.walls.bubblewrap.probe`'s sentence that is bwrap's own (never its advice about containers)."""
    text = "; ".join(part for part in probe_text.split("; ") if "unconfined" not in part)
    text = text.split("; inside a container", 1)[0]
    inner = text.split("refused to build a sandbox (", 1)
    return inner[1].rstrip(")") if len(inner) == 2 else text


def explain(probe_text: str, installed: bool) -> str:
    """Why tier A does not hold: bwrap's own words, and the cause behind them where bwrap is ``installed``."""
    said = bwrap_cause(probe_text)
    return namespace_cause(said) if installed else said
