"""Run a command as root under Docker's default restrictions, without Docker: how the grader is tested for Gradescope.

``python -m mha_course.grading.walls.container_repro -- COMMAND [ARGS ...]`` (as root, with CAP_SYS_ADMIN)
does what runc does for ``docker run`` with moby's defaults, in this order::

    mounts       a private mount namespace; moby's masked paths (/proc/kcore, /proc/keys, ... : /dev/null
                 over files, an empty read-only tmpfs over folders) and read-only paths (/proc/sys,
                 /proc/sysrq-trigger, /proc/irq, /proc/bus, /proc/fs); the cgroup tree read-only
    seccomp      moby's default profile for x86_64 (profiles/seccomp/default.json) with Docker's
                 capabilities: the calls it does not allow fail with EPERM, clone with a namespace flag
                 with EPERM, clone3 with ENOSYS, socket(AF_ALG / AF_VSOCK) and personality with odd
                 values with EPERM. Installed while still privileged and without no_new_privs, as runc
                 does
    capabilities the 14 Docker keeps (CHOWN, DAC_OVERRIDE, FSETID, FOWNER, MKNOD, NET_RAW, SETGID,
                 SETUID, SETFCAP, SETPCAP, NET_BIND_SERVICE, SYS_CHROOT, KILL, AUDIT_WRITE): every other
                 one leaves the bounding set, and the permitted, effective and inheritable sets
    exec         the command, as root

What it does not reproduce: Docker's own namespaces (PID, network, UTS, IPC: the command shares this
machine's), its AppArmor profile, and its device cgroup. One liberty, on by default: a Python
installation inside a folder closed to other users (``/root/.pyenv`` under ``/root``, mode 0700) is
shown through a 0711 folder holding only it, as an image's ``/usr`` would be (``--open PATH`` does
the same for more paths, ``--keep-closed-folders`` turns it off).
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import os
import sys
from pathlib import Path

from . import seccomp_filter as sf
from .seccomp_filter import ALLOW, ArgBits, ArgIn

DOCKER_CAPS = {"CHOWN": 0, "DAC_OVERRIDE": 1, "FOWNER": 3, "FSETID": 4, "KILL": 5, "SETGID": 6, "SETUID": 7, "SETPCAP": 8, "NET_BIND_SERVICE": 10, "NET_RAW": 13, "SYS_CHROOT": 18, "MKNOD": 27, "AUDIT_WRITE": 29, "SETFCAP": 31}  # fmt: skip
MASKED = ("/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/sched_debug", "/proc/scsi", "/proc/timer_list", "/proc/timer_stats", "/sys/devices/virtual/powercap", "/sys/firmware")  # fmt: skip
READ_ONLY = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")

#: x86_64 calls moby's default profile leaves out for a container with Docker's capabilities (derived from
#: moby's profiles/seccomp/default.json at moby commit b985e23, kernel >= 4.8): they fail with EPERM
MOBY_DENIED = (
    103, 134, 135, 136, 139, 153, 155, 156, 163, 164, 165, 166, 167, 168, 169, 170, 171, 172, 173, 174, 175,
    176, 177, 178, 179, 180, 181, 182, 183, 184, 185, 212, 227, 236, 237, 238, 239, 246, 248, 249, 250, 256,
    272, 279, 298, 300, 304, 308, 312, 313, 320, 321, 323, 425, 426, 427, 428, 429, 430, 431, 432, 433, 438,
    440, 442, 443, 450, 459, 460, 461, 467, 468, 469,
)  # fmt: skip
MOBY_LAST_KNOWN = 469  # calls numbered above it are not in the profile's allow list either


def moby_filter() -> sf.Filter:
    """moby's default seccomp profile on x86_64 for a process without CAP_SYS_ADMIN (as :data:`MOBY_DENIED`)."""
    rules: dict[int, int | ArgIn | ArgBits] = {nr: errno.EPERM for nr in MOBY_DENIED}
    rules[sf.NR["clone"]] = ArgBits(0, 0x7E020000, errno.EPERM, ALLOW)
    rules[sf.NR["clone3"]] = errno.ENOSYS
    rules[sf.NR["socket"]] = ArgIn(0, (38, 40), errno.EPERM, ALLOW)  # AF_ALG, AF_VSOCK
    rules[sf.NR["personality"]] = ArgIn(0, (0, 8, 0x20000, 0x20008, 0xFFFFFFFF), ALLOW, errno.EPERM)
    return sf.Filter(rules, above=(MOBY_LAST_KNOWN, errno.EPERM))


_libc = ctypes.CDLL(None, use_errno=True)
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = (
    1,
    2,
    4,
    8,
    32,
    4096,
    16384,
    1 << 18,
)
CLONE_NEWNS = 0x00020000


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    if _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


def _mask_and_protect() -> None:
    if _libc.unshare(CLONE_NEWNS) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWNS): {os.strerror(err)} (run as root, outside any container)")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    for path in MASKED:
        if os.path.isdir(path):
            _mount("tmpfs", path, "tmpfs", MS_RDONLY, "size=0")
        elif os.path.exists(path):
            _mount("/dev/null", path, None, MS_BIND)
    for path in READ_ONLY:
        if os.path.exists(path):
            _mount(path, path, None, MS_BIND | MS_REC)
            _mount(path, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    cgroups = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for path in cgroups:
        if path == "/sys/fs/cgroup" or path.startswith("/sys/fs/cgroup/"):
            try:
                _mount(path, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
            except OSError:
                pass  # a submount that refuses: the grader's cgroup probe then still finds it writable


def _open_closed_folders(extra: list[str]) -> None:
    """Show what lies in a closed folder (/root/.pyenv in /root, mode 0700) through a 0711 tmpfs over that
    folder holding only those entries, bind-mounted: as an image's /usr or /autograder would be."""
    from .confined import python_roots, unreachable

    for _ in range(8):  # a closed folder inside a closed folder opens on the next round
        wanted: dict[str, set[str]] = {}
        # the user's matplotlib cache too: its font list spares each sandbox a 2 s font scan, as in the image
        fonts = os.path.expanduser("~/.cache/matplotlib")
        for path in [sys.executable, *python_roots(), *extra, *([fonts] if os.path.isdir(fonts) else [])]:
            closed = unreachable(path)
            if closed is not None:
                wanted.setdefault(closed, set()).add(Path(os.path.realpath(path)).relative_to(closed).parts[0])
        if not wanted:
            return
        for closed, children in wanted.items():
            keep = {child: os.open(os.path.join(closed, child), os.O_PATH) for child in sorted(children)}
            _mount("tmpfs", closed, "tmpfs", 0, "mode=0711,size=64k")
            for child, fd in keep.items():
                target = os.path.join(closed, child)
                if os.path.isdir(f"/proc/self/fd/{fd}"):
                    os.mkdir(target, 0o755)
                else:
                    open(target, "w").close()
                _mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
                os.close(fd)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _drop_capabilities() -> None:
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    keep = set(DOCKER_CAPS.values())
    for cap in range(last + 1):
        if cap not in keep and _libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            err = ctypes.get_errno()
            if err != errno.EINVAL:
                raise OSError(err, f"PR_CAPBSET_DROP {cap}: {os.strerror(err)}")
    _libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL
    mask = sum(1 << c for c in keep)
    data = (_CapData * 2)(_CapData(mask & 0xFFFFFFFF, mask & 0xFFFFFFFF, 0), _CapData(mask >> 32, mask >> 32, 0))
    if _libc.capset(ctypes.byref(_CapHeader(0x20080522, 0)), data) != 0:  # _LINUX_CAPABILITY_VERSION_3
        err = ctypes.get_errno()
        raise OSError(err, f"capset: {os.strerror(err)}")


def enter(open_closed_folders: bool = True, seccomp: bool = True, also_open: tuple[str, ...] = ()) -> None:
    """Turn the calling (single-threaded) root process into a default Docker container's process, for good.

    ``seccomp=False`` is ``docker run --security-opt seccomp=unconfined``: masked /proc and capabilities only.
    ``also_open``: more paths to show through closed folders (beside this Python's installation).
    """
    if os.geteuid() != 0:
        raise PermissionError(f"the reproduction of Docker's restrictions must start as root, not uid {os.geteuid()}")
    if not sf.supported():
        raise OSError(errno.ENOSYS, "the reproduction's seccomp profile is written for x86_64 Linux only")
    _mask_and_protect()
    if open_closed_folders:
        _open_closed_folders(list(also_open))
    if seccomp:
        moby_filter().install()  # privileged and without no_new_privs, as runc installs it
    _drop_capabilities()


#: ``python -c`` source that runs :func:`main` with ``mha_course`` bound to a bare package over the folder named
#: in ``argv[1]``: the course's ``__init__`` imports torch (a second of CPU at each start, measured 1.15 s
#: against 0.18 s), and the reproduction, which imports only walls/ modules before it execs the command, needs none of it
LAUNCHER = (
    "import sys, types\n"
    "package = types.ModuleType('mha_course')\n"
    "package.__path__ = [sys.argv.pop(1)]\n"
    "sys.modules['mha_course'] = package\n"
    "from mha_course.grading.walls.container_repro import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def command(
    argv: list[str], open_closed_folders: bool = True, seccomp: bool = True, also_open: tuple[str, ...] = ()
) -> list[str]:
    """The command line that runs ``argv`` under the reproduction (for subprocess): :func:`main` by :data:`LAUNCHER`."""
    flags = ([] if open_closed_folders else ["--keep-closed-folders"]) + ([] if seccomp else ["--seccomp-unconfined"])
    flags += [f"--open={path}" for path in also_open]
    package = str(Path(__file__).resolve().parents[2])
    return [sys.executable, "-c", LAUNCHER, package, *flags, "--", *argv]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mha_course.grading.walls.container_repro",
        description="Run a command as root under Docker's default restrictions (seccomp profile, capabilities, "
        "masked /proc), without Docker.",
    )
    parser.add_argument("--keep-closed-folders", action="store_true", help="do not open a Python under /root")
    parser.add_argument(
        "--seccomp-unconfined",
        action="store_true",
        help="no seccomp filter (docker run --security-opt seccomp=unconfined)",
    )
    parser.add_argument(
        "--open", action="append", default=[], metavar="PATH", help="also show PATH through closed folders above it"
    )
    parser.add_argument("argv", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS ...]")
    args = parser.parse_args(argv)
    cmd = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not cmd:
        parser.error("give a command after --")
    try:
        enter(not args.keep_closed_folders, not args.seccomp_unconfined, tuple(args.open))
    except OSError as exc:
        print(f"container_repro: {exc}", file=sys.stderr)
        return 125
    os.execvp(cmd[0], cmd)
    return 127


if __name__ == "__main__":
    sys.exit(main())
