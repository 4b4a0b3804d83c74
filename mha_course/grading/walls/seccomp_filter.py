"""A seccomp filter assembled by hand: which system calls a process (and its children) may make.

A seccomp filter is a classic-BPF program the kernel runs on every system call, reading
``struct seccomp_data`` (``include/uapi/linux/seccomp.h``)::

    offset 0   int   nr                  the system call number
    offset 4   u32   arch                AUDIT_ARCH_X86_64 = 0xC000003E (linux/audit.h)
    offset 8   u64   instruction_pointer
    offset 16  u64   args[6]             args[i]'s low 32 bits at 16 + 8 i (little endian)

and returning ``SECCOMP_RET_ALLOW``, ``SECCOMP_RET_ERRNO | errno`` or ``SECCOMP_RET_KILL_PROCESS``.
:class:`Filter` turns a table ``{nr: action}`` into such a program: a check of the architecture
(anything but x86_64, x32 included, is killed: its numbers mean other calls), then one test per
listed call, then a default. An action is an errno (the call fails with it), or :class:`ArgIn` /
:class:`ArgBits` for a decision on one argument. :func:`tier_b_filter` is the grader's filter for
submissions; :mod:`.container_repro` builds Docker's default profile from the same parts.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from dataclasses import dataclass

# classic BPF opcodes (linux/bpf_common.h, linux/filter.h)
LD_W_ABS = 0x00 | 0x00 | 0x20  # BPF_LD | BPF_W | BPF_ABS
JEQ_K, JGE_K, JSET_K = 0x05 | 0x10, 0x05 | 0x30, 0x05 | 0x40  # BPF_JMP | BPF_J* | BPF_K
RET_K = 0x06
RET_KILL_PROCESS, RET_ALLOW, RET_ERRNO = 0x80000000, 0x7FFF0000, 0x00050000
AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2

ALLOW = -1  # an action: let the call through (any other int is the errno it fails with)

#: x86_64 numbers (arch/x86/entry/syscalls/syscall_64.tbl) of the calls the grader's filters name
NR = {
    "socket": 41, "socketpair": 53, "clone": 56, "ptrace": 101, "syslog": 103, "personality": 135,
    "ustat": 136, "sysfs": 139, "vhangup": 153, "pivot_root": 155, "_sysctl": 156, "chroot": 161,
    "acct": 163, "settimeofday": 164, "mount": 165, "umount2": 166, "swapon": 167, "swapoff": 168,
    "reboot": 169, "sethostname": 170, "setdomainname": 171, "iopl": 172, "ioperm": 173,
    "init_module": 175, "delete_module": 176, "quotactl": 179, "lookup_dcookie": 212,
    "clock_settime": 227, "add_key": 248, "request_key": 249, "keyctl": 250, "unshare": 272,
    "move_pages": 279, "perf_event_open": 298, "fanotify_init": 300, "name_to_handle_at": 303,
    "open_by_handle_at": 304, "setns": 308, "process_vm_readv": 310, "process_vm_writev": 311,
    "kcmp": 312, "finit_module": 313, "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428,
    "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "clone3": 435,
    "pidfd_getfd": 438, "mount_setattr": 442, "quotactl_fd": 443, "kexec_load": 246,
    "open_tree_attr": 467, "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190, "fallocate": 285,
    "setxattrat": 463,
}  # fmt: skip

# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET (linux/sched.h); CLONE_NEWTIME is
# 0x80 (a bit shared with CSIGNAL's range, so only unshare can ask for it, and unshare is refused whole)
CLONE_NEW_MASK = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
AF_UNIX = 1


@dataclass(frozen=True)
class ArgIn:
    """Decide on argument ``index`` (its low 32 bits): ``if_in`` when it is one of ``values``, else ``otherwise``."""

    index: int
    values: tuple[int, ...]
    if_in: int
    otherwise: int


@dataclass(frozen=True)
class ArgBits:
    """``if_any`` when argument ``index`` has any bit of ``mask`` set, else ``otherwise``."""

    index: int
    mask: int
    if_any: int
    otherwise: int


def _ret(action: int) -> tuple[int, int, int, int]:
    return (RET_K, 0, 0, RET_ALLOW if action == ALLOW else RET_ERRNO | (action & 0xFFFF))


class Filter:
    """A seccomp program for x86_64, built once in the grader; :meth:`install` in the child.

    ``rules`` maps system-call numbers to an action; ``above`` (number, errno) refuses every call
    numbered above it (a profile written before newer calls existed); the rest get ``default``.
    Raises ValueError for a program the kernel would refuse (over 4096 instructions).
    """

    def __init__(
        self, rules: dict[int, int | ArgIn | ArgBits], default: int = ALLOW, above: tuple[int, int] | None = None
    ) -> None:
        code: list[tuple[int, int, int, int]] = [
            (LD_W_ABS, 0, 0, 4),  # arch
            (JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
            (RET_K, 0, 0, RET_KILL_PROCESS),
            (LD_W_ABS, 0, 0, 0),  # nr
            (JGE_K, 0, 1, X32_SYSCALL_BIT),
            (RET_K, 0, 0, RET_KILL_PROCESS),
        ]
        if above is not None:
            code += [(JGE_K, 0, 1, above[0] + 1), _ret(above[1])]
        for nr, action in sorted(rules.items()):
            if isinstance(action, int):
                code += [(JEQ_K, 0, 1, nr), _ret(action)]
                continue
            block: list[tuple[int, int, int, int]] = [(LD_W_ABS, 0, 0, 16 + 8 * action.index)]
            if isinstance(action, ArgIn):
                n = len(action.values)
                block += [(JEQ_K, n - i, 0, v) for i, v in enumerate(action.values)]
                block += [_ret(action.otherwise), _ret(action.if_in)]
            else:
                block += [(JSET_K, 0, 1, action.mask), _ret(action.if_any), _ret(action.otherwise)]
            code += [(JEQ_K, 0, len(block), nr), *block]  # the block always returns: nr is still loaded after it
        code.append(_ret(default))
        if len(code) > 4096:
            raise ValueError(f"a seccomp program holds at most 4096 instructions, this one {len(code)}")
        self.instructions = code
        self._buffer = (ctypes.c_uint64 * len(code))(*(c | jt << 16 | jf << 24 | k << 32 for c, jt, jf, k in code))

        class SockFprog(ctypes.Structure):  # struct sock_fprog
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

        self._prog = SockFprog(len(code), ctypes.addressof(self._buffer))

    def install(self) -> None:
        """Apply the filter to the calling thread and its future children (needs no_new_privs or CAP_SYS_ADMIN)."""
        if _prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(self._prog), 0, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"prctl(PR_SET_SECCOMP): {os.strerror(err)}")


_libc = ctypes.CDLL(None, use_errno=True)
_prctl = _libc.prctl
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def set_no_new_privs() -> None:
    """prctl(PR_SET_NO_NEW_PRIVS): execve never grants privileges again (setuid bits, file capabilities)."""
    if _prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(err)}")


def supported() -> bool:
    """Whether this machine runs x86_64 Linux, the one architecture these programs are written for."""
    return platform.system() == "Linux" and platform.machine() in ("x86_64", "AMD64")


#: what a submission never needs: other processes' memory, namespaces, mounts, the kernel's keyring,
#: BPF, perf, kernel modules, io_uring (its requests run outside seccomp's view), clocks, swap, reboot
TIER_B_DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd", "unshare", "setns", "mount",
    "umount2", "pivot_root", "chroot", "mount_setattr", "move_mount", "open_tree", "open_tree_attr", "fsopen",
    "fsconfig", "fsmount", "fspick", "kexec_load", "kexec_file_load", "bpf", "perf_event_open", "keyctl",
    "add_key", "request_key", "init_module", "finit_module", "delete_module", "open_by_handle_at",
    "name_to_handle_at", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register", "iopl",
    "ioperm", "swapon", "swapoff", "reboot", "syslog", "acct", "quotactl", "quotactl_fd", "lookup_dcookie",
    "settimeofday", "clock_settime", "fanotify_init", "sethostname", "setdomainname", "vhangup", "_sysctl",
    "ustat", "sysfs", "move_pages",
)  # fmt: skip


#: calls that take disk space without writing a file's bytes, which RLIMIT_FSIZE bounds: fallocate reserves
#: blocks at once (with FALLOC_FL_KEEP_SIZE beyond the file's end, so past RLIMIT_FSIZE too), extended
#: attributes hold up to 64 KiB each outside the file's data
TIER_B_NO_SPACE = ("fallocate", "setxattr", "lsetxattr", "fsetxattr", "setxattrat")


def tier_b_filter() -> Filter:
    """The submission's filter: :data:`TIER_B_DENIED` fail with EPERM; no socket at all but an AF_UNIX
    socketpair; clone without namespace flags only; clone3 answers ENOSYS (so the C library falls back to
    clone, whose flags this filter can read); personality only to the values Docker allows.

    :data:`TIER_B_NO_SPACE`: fallocate fails with EPERM (glibc's posix_fallocate falls back to writing
    the blocks only on EOPNOTSUPP, and writing is bounded by RLIMIT_FSIZE); setting an extended attribute
    with EOPNOTSUPP, what a file system without them answers (shutil.copy2 and the like go on without)."""
    rules: dict[int, int | ArgIn | ArgBits] = {NR[name]: errno.EPERM for name in TIER_B_DENIED}
    rules[NR["fallocate"]] = errno.EPERM
    for name in TIER_B_NO_SPACE[1:]:
        rules[NR[name]] = errno.EOPNOTSUPP
    rules[NR["socket"]] = errno.EPERM
    rules[NR["socketpair"]] = ArgIn(0, (AF_UNIX,), ALLOW, errno.EPERM)
    rules[NR["clone"]] = ArgBits(0, CLONE_NEW_MASK, errno.EPERM, ALLOW)
    rules[NR["clone3"]] = errno.ENOSYS
    rules[NR["personality"]] = ArgIn(0, (0, 8, 0x20000, 0x20008, 0xFFFFFFFF), ALLOW, errno.EPERM)
    return Filter(rules)
