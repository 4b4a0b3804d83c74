"""Landlock through its three system calls: a process limits which files (and TCP ports) it may reach.

Landlock (Linux >= 5.13) lets an unprivileged process with ``no_new_privs`` give up access rights
for itself and every process it starts; nothing can lift them again. A *ruleset* names the kinds of
access it handles (everything of those kinds is then denied) and rules grant some back beneath
given folders. The kernel's feature level is its ABI version::

    ABI 1 (5.13) files: execute, read, write, list, make/remove   ABI 4 (6.7)  TCP bind / connect
    ABI 2 (5.19) REFER (link/rename across folders)               ABI 5 (6.10) ioctl on devices
    ABI 3 (6.2)  TRUNCATE                                         ABI 6 (6.12) scopes: signals and
                                                                               abstract unix sockets

The layouts below are ``include/uapi/linux/landlock.h``'s; system call numbers are x86_64's (the
same on aarch64: 444-446 are shared by every architecture's table since 5.13).

Usage (the grader builds the ruleset in its own process and the child only calls
:func:`restrict_self`, so that nothing but system calls runs between fork and exec)::

    rs = Ruleset(abi_version())
    rs.allow("/usr", READ)
    rs.allow(scratch, READ | WRITE)
    rs.restrict_self()            # in the child, after prctl(PR_SET_NO_NEW_PRIVS)
"""

from __future__ import annotations

import ctypes
import os

SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1

# access rights on files and folders (LANDLOCK_ACCESS_FS_*)
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
# TCP (LANDLOCK_ACCESS_NET_*, ABI 4) and scopes (LANDLOCK_SCOPE_*, ABI 6)
BIND_TCP, CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1

#: rights that apply to a regular file (a rule on a file may grant only these)
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
READ = READ_FILE | READ_DIR
READ_EXEC = READ | EXECUTE
WRITE = WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_DIR | MAKE_REG | MAKE_SYM | TRUNCATE | MAKE_FIFO


def fs_rights(abi: int) -> int:
    """Every file-system right the kernel of this ABI version knows (all are handled: denied unless granted)."""
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


class _RulesetAttr(ctypes.Structure):  # struct landlock_ruleset_attr (ABI 6 layout; shorter sizes for older)
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):  # struct landlock_path_beneath_attr, __attribute__((packed))
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is absent, disabled, or refused (e.g. by seccomp)."""
    result = _syscall(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))
    return int(result) if result > 0 else 0


class Ruleset:
    """A Landlock ruleset under construction (an open file descriptor), for one child process.

    Handles every file-system right of ``abi``; at ABI >= 4 also TCP bind and connect (no port is
    granted, so both are denied); at ABI >= 6 scopes signals and abstract unix sockets to the domain.
    Raises ValueError for ``abi`` < 1 and OSError when the kernel refuses.
    """

    def __init__(self, abi: int) -> None:
        if not isinstance(abi, int) or abi < 1:
            raise ValueError(f"Landlock ABI version must be an int >= 1, got {abi!r}")
        self.abi = abi
        self.handled = fs_rights(abi)
        attr = _RulesetAttr(self.handled, BIND_TCP | CONNECT_TCP if abi >= 4 else 0)
        if abi >= 6:
            attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        size = 24 if abi >= 6 else 16 if abi >= 4 else 8  # the struct as the kernel of that ABI knows it
        self.fd = _check(
            _syscall(SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)),
            "landlock_create_ruleset",
        )
        self.rules: list[tuple[str, int]] = []

    def allow(self, path: str | os.PathLike, access: int) -> None:
        """Grant ``access`` (masked to what this ABI handles, and to file rights for a file) beneath ``path``."""
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        try:
            mask = self.handled if os.path.isdir(f"/proc/self/fd/{fd}") else self.handled & FILE_RIGHTS
            attr = _PathBeneathAttr(access & mask, fd)
            _check(
                _syscall(
                    SYS_ADD_RULE,
                    ctypes.c_int(self.fd),
                    ctypes.c_int(RULE_PATH_BENEATH),
                    ctypes.byref(attr),
                    ctypes.c_uint32(0),
                ),
                f"landlock_add_rule({path})",
            )
        finally:
            os.close(fd)
        self.rules.append((os.fspath(path), access & mask))

    def restrict_self(self) -> None:
        """Enforce the ruleset on the calling thread (then its children); needs no_new_privs or CAP_SYS_ADMIN."""
        _check(_syscall(SYS_RESTRICT_SELF, ctypes.c_int(self.fd), ctypes.c_uint32(0)), "landlock_restrict_self")

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
