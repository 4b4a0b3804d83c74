"""Which walls hold on this machine: tier A (bubblewrap), B (Landlock + seccomp + own uid), C (own uid only).

:func:`choose` probes the tiers strongest first and returns the first that holds, with the reason
each stronger one failed. :class:`TieredWalls` is what every output names (CSV, report,
results.json). :func:`namespace_cause` says in one sentence why bubblewrap cannot create its
namespaces, from what this process can see: its seccomp mode and capabilities, the kernel's user
namespace switches, and masked /proc paths (a fresh /proc cannot be mounted beside them).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from . import landlock, tier_b, view
from . import tier_a as isolation
from .resources import RUNTIME_MB, Resources
from .tier_a import WallKind


class Tier(StrEnum):
    """A tier of walls, strongest first; the letter is what --min-isolation takes and every output names."""

    A = "A"  # bubblewrap
    B = "B"  # Landlock, seccomp, own uid
    C = "C"  # own uid only
    NONE = ""  # plain processes, as --unsafe-no-isolation asks


TIERS = (Tier.A, Tier.B, Tier.C)
CAP_SYS_ADMIN = 21


@dataclass(frozen=True)
class TieredWalls(isolation.Walls):
    """:class:`~mha_course.grading.walls.tier_a.Walls` with the tier's letter (A, B, C; "" for none) and why stronger tiers failed."""

    tier: Tier = Tier.NONE
    refused: dict[str, str] = field(default_factory=dict)

    @property
    def isolated(self) -> bool:
        return self.kind != WallKind.NONE

    def summary(self) -> str:
        limits = ", ".join(f"{k} {v}" for k, v in self.limits.items())
        if self.tier == Tier.A:
            return f"{super().summary()} (tier A)"
        if self.tier == Tier.B:
            return (
                f"tier B ({self.detail}): own uid, no capabilities, no_new_privs, seccomp, Landlock: read-only view of "
                f"the runtime, writes only to its scratch folder; limits: {limits}"
            )
        if self.tier == Tier.C:
            return (
                f"tier C, REDUCED ({self.detail}): own uid, no capabilities, no_new_privs, seccomp; any file every "
                f"user may read stays readable to the submission; limits: {limits}"
            )
        return super().summary()

    def as_dict(self) -> dict[str, Any]:
        return {**super().as_dict(), "tier": self.tier, "refused": dict(self.refused)}


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


def _bwrap_cause(probe_text: str) -> str:
    """The part of :func:`~mha_course.grading.walls.tier_a.probe`'s sentence that is bwrap's own (never its advice about containers)."""
    text = "; ".join(part for part in probe_text.split("; ") if "unconfined" not in part)
    text = text.split("; inside a container", 1)[0]
    inner = text.split("refused to build a sandbox (", 1)
    return inner[1].rstrip(")") if len(inner) == 2 else text


def choose(min_tier: str = "B", unsafe: bool = False) -> tuple[Tier, int, dict[str, str]]:
    """(tier that will be used: "A" | "B" | "C" | "", Landlock ABI, {tier: why it does not hold}).

    Probes A, then B, then C, and stops at the first that holds. Raises ValueError for an unknown
    ``min_tier`` and :class:`~mha_course.grading.walls.tier_a.IsolationError` when the tier found is weaker than
    ``min_tier`` (or none holds), unless ``unsafe``: then "" (plain processes, as ``--unsafe-no-isolation`` says).
    """
    if min_tier not in TIERS:
        raise ValueError(f"min_tier must be one of {', '.join(TIERS)}, got {min_tier!r}")
    refused: dict[str, str] = {}
    found, abi = Tier.NONE, 0
    why_a = isolation.probe()
    if why_a is None:
        found = Tier.A
    else:
        refused[Tier.A] = namespace_cause(_bwrap_cause(why_a)) if isolation.bwrap_path() else _bwrap_cause(why_a)
        abi = landlock.abi_version()
        if abi:
            why_b = tier_b.probe(abi)
            if why_b is None:
                found = Tier.B
            else:
                refused[Tier.B] = why_b
        else:
            refused[Tier.B] = "Landlock is not available on this kernel (it needs Linux >= 5.13 with Landlock enabled)"
        if not found:
            why_c = tier_b.probe(0)
            if why_c is None:
                found, abi = Tier.C, 0
            else:
                refused[Tier.C] = why_c
    if not found or TIERS.index(found) > TIERS.index(min_tier):
        if not unsafe:
            raise view.IsolationError(refusal(found, min_tier, refused))
        if found:
            refused[found] = f"weaker than --min-isolation {min_tier}"
        return Tier.NONE, 0, refused  # as the instructor asked: plain processes
    return found, abi, refused


def refusal(found: Tier, min_tier: str, refused: dict[str, str]) -> str:
    """The sentence the grader exits with: what each stronger tier lacks here, and the instructor's choices."""
    names: dict[str, str] = {
        Tier.A: "tier A (bubblewrap)",
        Tier.B: "tier B (Landlock, seccomp, own uid)",
        Tier.C: "tier C (own uid only)",
    }
    reasons = "; ".join(f"{names[t]}: {why}" for t, why in refused.items())
    have = f"only {names[found]} holds" if found else "no tier holds"
    options = []
    if found and found != min_tier:
        options.append(f"accept {names[found]} with --min-isolation {found}")
    options.append("run the grader as root on a Linux kernel with Landlock (>= 5.13)")
    options.append("or pass --unsafe-no-isolation to run submissions as plain processes (only for code you trust)")
    return (
        f"refusing to grade: {have}, and --min-isolation is {min_tier}. {reasons}. Submissions are untrusted code: "
        + ", ".join(options)
    )


def walls(
    tier: Tier,
    abi: int,
    detail_a: str,
    cgroup: str | None,
    refused: dict[str, str],
    own_uid: bool = False,
    uid_note: str = "",
) -> TieredWalls:
    """The walls of the chosen tier as every output reports them (``own_uid``, ``uid_note``: tier A as root)."""
    res = Resources()
    if tier == Tier.A:
        if cgroup:
            processes = f"{res.processes} tasks ({cgroup})"
        elif os.getuid() != 0:
            processes = f"{res.processes} more tasks (RLIMIT_NPROC)"
        elif own_uid:
            processes = f"{res.processes} tasks (RLIMIT_NPROC of the sandbox's own uid)"
        else:
            processes = "not limited (no writable cgroup)"
        return TieredWalls(
            WallKind.BUBBLEWRAP,
            detail_a,
            {
                "memory": f"--memory-mb + {RUNTIME_MB} MiB for the runtime ({cgroup or 'RLIMIT_AS and the grader watch'})",
                "processes": processes,
                "scratch": f"{res.scratch_mb} MiB tmpfs",
                "file size": f"{res.file_mb} MiB",
                "CPU": f"{res.cpu_seconds} s",
                "network": "none",
            },
            uid_note,
            tier=Tier.A,
            refused=refused,
        )
    if tier in (Tier.B, Tier.C):
        network = "no sockets but a socket pair to the grader (seccomp)"
        if tier == Tier.B and abi >= 4:
            network += "; TCP bind and connect denied (Landlock)"
        return TieredWalls(
            WallKind.LANDLOCK if tier == Tier.B else WallKind.UID,
            f"Landlock ABI {abi}" if tier == Tier.B else "no Landlock on this kernel: uid and file permissions only",
            {
                "memory": f"--memory-mb + {RUNTIME_MB} MiB (RLIMIT_AS and the grader watch)",
                "processes": f"{res.processes} tasks (RLIMIT_NPROC of the sandbox's own uid)",
                "scratch": (
                    f"a private 0700 folder: {res.scratch_mb} MiB watched twice a second (no fallocate; each file "
                    f"at most {min(res.file_mb, res.scratch_mb)} MiB, RLIMIT_FSIZE)"
                ),
                "file size": f"{min(res.file_mb, res.scratch_mb)} MiB",
                "CPU": f"{res.cpu_seconds} s",
                "network": network,
            },
            tier=tier,
            refused=refused,
        )
    return TieredWalls(
        WallKind.NONE, "; ".join(f"tier {t}: {why}" for t, why in refused.items()), tier=Tier.NONE, refused=refused
    )
