"""The system calls a run of model code may not make: a seccomp filter written with libseccomp.

The kernel keeps state outside every namespace a sandbox makes (keyrings, BPF maps, perf events) and exposes
calls that would undo the sandbox (mounts, new namespaces, tracing another process). A child refuses at least
what Docker's default profile refuses (``DENIED``, ``CLONE_NAMESPACES``, ``PERSONALITY_FLAGS``): the call fails
with EPERM (``clone3`` with ENOSYS, so the C library falls back to ``clone``, whose flags the filter can see).

How: libseccomp (the C library every distribution ships, ``libseccomp2``) compiles the rules to a BPF program
once per sandbox process (``program``); a forked child installs that program with one ``prctl`` call
(``install``), which costs microseconds. Loaded through ctypes so that ``python -S`` launchers and a grading
environment's interpreter, which have no binding installed, load it too. Without libseccomp, ``program`` is
None and ``unavailable`` says why: the run's ``isolation:`` line says so and ``--bench-require-isolation``
refuses the run.

Plain standard library only: the subprocess launchers import this module with ``python -S``.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os

SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_CMP_MASKED_EQ = 7
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SOCK_FILTER_SIZE = 8  # struct sock_filter: u16 code, u8 jt, u8 jf, u32 k

# Refused outright: keyrings (per-uid state that outlives a run), kernel modules, clocks, reboot and swap,
# mounts and namespaces, tracing and reading other processes, BPF, perf events, userfaultfd, io_uring, and
# the rest of what Docker's default profile refuses to a container without capabilities.
DENIED = (
    "add_key",
    "request_key",
    "keyctl",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "pidfd_getfd",
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    "open_by_handle_at",
    "name_to_handle_at",
    "fanotify_init",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "init_module",
    "finit_module",
    "delete_module",
    "create_module",
    "query_module",
    "get_kernel_syms",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "clock_settime",
    "clock_adjtime",
    "settimeofday",
    "adjtimex",
    "stime",
    "acct",
    "quotactl",
    "quotactl_fd",
    "nfsservctl",
    "lookup_dcookie",
    "uselib",
    "ustat",
    "sysfs",
    "_sysctl",
    "syslog",
    "vhangup",
    "iopl",
    "ioperm",
    "vm86",
    "vm86old",
    "sethostname",
    "setdomainname",
    "get_mempolicy",
    "set_mempolicy",
    "mbind",
    "move_pages",
)
# clone with any of these flags: a new namespace (CLONE_NEWNS ... CLONE_NEWNET, CLONE_NEWCGROUP, CLONE_NEWTIME)
CLONE_NAMESPACES = (0x00020000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x02000000, 0x00000080)
# personality: as in Docker's profile only these values pass (the default, PER_LINUX32, UNAME26, both, and the
# query); any other (ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, ...) is refused
PERSONALITY_ALLOWED = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)


class _ArgCmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def errno_action(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)  # SCMP_ACT_ERRNO(code)


@functools.lru_cache(maxsize=1)
def _library() -> tuple[ctypes.CDLL | None, str]:
    try:
        lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    except OSError:
        from ctypes.util import find_library  # why: it starts ldconfig; only when the usual name is not found

        try:
            lib = ctypes.CDLL(find_library("seccomp") or "libseccomp.so", use_errno=True)
        except OSError as exc:
            return None, f"libseccomp is not installed ({exc}); install it, e.g. apt-get install libseccomp2"
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(_ArgCmp),
    ]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return lib, ""


def blocks_outside(allowed: tuple[int, ...], bits: int = 32) -> list[tuple[int, int]]:
    """(mask, value) pairs whose matches, ``x & mask == value``, are exactly the ``bits``-bit numbers not in
    ``allowed``: the subtrees of the binary trie of ``allowed`` that hold none of them. (libseccomp takes one
    comparison per argument and rule, so "none of these values" is a union of such blocks.)"""
    blocks: list[tuple[int, int]] = []
    todo = [(0, 0, tuple(allowed))]  # (prefix length, prefix, allowed values with that prefix)
    while todo:
        length, prefix, values = todo.pop()
        if length == bits:
            continue
        for bit in (0, 1):
            here = (prefix << 1) | bit
            inside = tuple(v for v in values if v >> (bits - length - 1) == here)
            if inside:
                todo.append((length + 1, here, inside))
            else:
                shift = bits - length - 1
                blocks.append((((1 << (length + 1)) - 1) << shift, here << shift))
    return blocks


def _rule(lib: ctypes.CDLL, ctx: int, action: int, name: str, *compares: tuple[int, int, int, int]) -> None:
    number = lib.seccomp_syscall_resolve_name(name.encode())
    if number < 0:  # __NR_SCMP_ERROR: no such call on this architecture (vm86 on x86-64): nothing to refuse
        return
    array = (_ArgCmp * max(1, len(compares)))(*(_ArgCmp(*c) for c in compares))
    result = lib.seccomp_rule_add_array(ctx, action, number, len(compares), array)
    if result < 0:
        raise OSError(-result, f"libseccomp refused the rule for {name}: {os.strerror(-result)}")


def _add_rules(lib: ctypes.CDLL, ctx: int) -> None:
    deny = errno_action(errno.EPERM)
    for name in DENIED:
        _rule(lib, ctx, deny, name)
    for flag in CLONE_NAMESPACES:
        _rule(lib, ctx, deny, "clone", (0, SCMP_CMP_MASKED_EQ, flag, flag))
    _rule(lib, ctx, errno_action(errno.ENOSYS), "clone3")  # its flags lie in memory the filter cannot read
    for mask, value in blocks_outside(PERSONALITY_ALLOWED):
        _rule(lib, ctx, deny, "personality", (0, SCMP_CMP_MASKED_EQ, mask, value))


@functools.lru_cache(maxsize=1)
def _compiled() -> tuple[bytes | None, str]:
    lib, why = _library()
    if lib is None:
        return None, why
    ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
    if not ctx:
        return None, "libseccomp could not start a filter (seccomp_init failed)"
    try:
        _add_rules(lib, ctx)
        data = _export(lib, ctx)
    except OSError as exc:
        return None, str(exc)
    finally:
        lib.seccomp_release(ctx)
    if not data or len(data) % SOCK_FILTER_SIZE:
        return None, f"libseccomp exported a filter of {len(data)} bytes, not whole instructions"
    return data, ""


def _export(lib: ctypes.CDLL, ctx: int) -> bytes:
    """The compiled program, through an in-memory file (no temporary file on a disk; ``tempfile`` is slow to
    import in a ``-S`` launcher)."""
    fd = os.memfd_create("agentbench-seccomp")
    try:
        result = lib.seccomp_export_bpf(ctx, fd)
        if result < 0:
            raise OSError(-result, f"libseccomp could not export the filter: {os.strerror(-result)}")
        size = os.lseek(fd, 0, os.SEEK_CUR)
        return os.pread(fd, size, 0)
    finally:
        os.close(fd)


def program() -> bytes | None:
    """The compiled filter (a BPF program, as libseccomp exports it), or None when this machine cannot make one
    (``unavailable`` says why). Compiled once per process: a sandbox process calls it before it forks children."""
    return _compiled()[0]


def unavailable() -> str:
    """Why no filter can be made here ("" when one can)."""
    return _compiled()[1]


def install(code: bytes) -> None:
    """Install the filter ``code`` on the calling thread (and every process it starts); needs ``no_new_privs``
    (or privileges). Irreversible: a child can add filters, never remove one."""
    buffer = ctypes.create_string_buffer(code, len(code))
    prog = _SockFprog(len(code) // SOCK_FILTER_SIZE, ctypes.cast(buffer, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"cannot install the seccomp filter: {os.strerror(err)}")
