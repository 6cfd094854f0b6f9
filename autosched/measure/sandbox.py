"""The sandbox of measuring processes: every process that builds or runs a program from outside runs
in it, inside a bubblewrap container started once per parent process (the fork server's).

Inside: no network (new network namespace), its own PIDs and IPC, no capabilities, an environment
of allow-listed settings only (no tokens, no database URL), a read-only view of the system's
programs and libraries, of Python and of autosched itself and nothing else of the host's files
(not its home directories, not ``/etc`` beyond the loader's cache, not the working directory), a
private ``/tmp``, and one writable directory, the scratch root (`scratch_dir`). Where the host lets
an unprivileged user run it (the Python and autosched it needs readable by all), it also runs as
``nobody``. Python starts isolated (``-I``: no user site, no ``PYTHON*`` variables, not the working
directory on its path), so a file named after a module of the standard library where autosched
runs changes nothing.

A host without bubblewrap (``apt-get install bubblewrap``) gets the rest (clean environment,
isolated Python, scratch directory, resource limits) and a warning; a worker or a server refuses
to start there unless told ``--unsafe-no-sandbox`` (`require`).
"""

from __future__ import annotations

import atexit
import functools
import importlib.util
import logging
import os
import shutil
import site
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from autosched.errors import UserError

logger = logging.getLogger(__name__)

UNSAFE_VARIABLE = "AUTOSCHED_UNSAFE_NO_SANDBOX"
"""Set to 1 by ``--unsafe-no-sandbox``: measure without the sandbox where bubblewrap is missing."""

PASSED_VARIABLES = frozenset(
    {
        "PATH", "LANG", "LC_ALL", "TZ", "LD_LIBRARY_PATH", "CC", "CXX", "CUDA_VISIBLE_DEVICES",
        "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS", "TVM_NUM_THREADS",
        "TVM_BIND_THREADS", "AUTOSCHED_MAX_PROGRAM_BYTES", "PYTHONPATH",
    }
)  # fmt: skip
"""The only variables a measuring process sees: how the system finds programs, libraries and the
C compiler TVM links with, the thread pools' and OpenBLAS's settings, the program size limit, and
``PYTHONPATH`` (modules that requests name; the directories it lists are bound read-only)."""

NOBODY = 65534
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d")
_PACKAGES = ("autosched", "autosched.server", "autosched.workers")
_PROBE_TIMEOUT_SECS = 60.0


def child_environment(extra: dict[str, str]) -> dict[str, str]:
    """The environment of a measuring process: the allow-listed variables of this one, then
    ``extra`` (also allow-listed); ``HOME`` is its private ``/tmp``."""
    passed = {name: value for name, value in os.environ.items() if name in PASSED_VARIABLES}
    refused = sorted(set(extra) - PASSED_VARIABLES)
    if refused:
        raise ValueError(f"a measuring process may not be given {', '.join(refused)}")
    return {**passed, **extra, "HOME": "/tmp"}


@dataclass(frozen=True)
class Sandbox:
    """How the fork server is started: in bubblewrap (``bwrap``, its path; None: without),
    as ``uid``."""

    bwrap: str | None
    uid: int

    @property
    def contained(self) -> bool:
        return self.bwrap is not None

    def server_command(self, module: str, *args: str) -> list[str]:
        """The command line that starts ``python -m module args`` in this sandbox, binding the
        directories on ``PYTHONPATH`` now."""
        prefix: list[str] = []
        if self.bwrap is None:
            _warn_uncontained()
        else:
            prefix = _bwrap_arguments(self.bwrap)
            if self.uid != os.geteuid():
                prefix = [*_setpriv(self.uid), *prefix]
        return [*prefix, sys.executable, "-I", "-m", module, *args]


@functools.cache
def scratch_root() -> Path:
    """The one directory measuring processes may write: their scratch directories and built
    libraries live under it; removed when this process exits."""
    root = Path(tempfile.mkdtemp(prefix="autosched-sandbox-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


def scratch_dir(prefix: str) -> Path:
    """A new directory under the scratch root, writable by the measuring processes."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=scratch_root()))
    give_to_sandbox(path)
    return path


def give_to_sandbox(path: Path) -> None:
    """Let the sandbox's user write ``path``, a directory under the scratch root."""
    uid = current().uid
    if uid != os.geteuid():
        os.chown(path, uid, uid)


def require(*, unsafe: bool) -> None:
    """For a process that measures programs from other people (a worker, a server): raise unless
    the sandbox works here or ``unsafe`` (``--unsafe-no-sandbox``) allows going without.

    Raises:
        UserError: no working bubblewrap, and not ``unsafe``; the message says how to get it.
    """
    if unsafe:
        os.environ[UNSAFE_VARIABLE] = "1"
    if not current().contained and not unsafe:
        raise UserError(
            f"measuring programs from others needs a sandbox: {_missing_reason()}; install "
            "bubblewrap (apt-get install bubblewrap), or pass --unsafe-no-sandbox to run them "
            "unconfined"
        )


@functools.cache
def current() -> Sandbox:
    """This host's sandbox, found once: bubblewrap as ``nobody`` where that works, else as this
    user in a user namespace, else none (a warning as the first measuring process starts)."""
    bwrap = shutil.which("bwrap")
    if bwrap is not None:
        if os.geteuid() == 0 and shutil.which("setpriv") and _readable_by_all(_read_only_paths()):
            unprivileged = Sandbox(bwrap, NOBODY)
            if _works(unprivileged):
                return unprivileged
        sandbox = Sandbox(bwrap, os.geteuid())
        if _works(sandbox):
            return sandbox
    return Sandbox(None, os.geteuid())


@functools.cache
def _warn_uncontained() -> None:
    if os.environ.get(UNSAFE_VARIABLE) != "1":
        logger.warning(
            "measuring processes run without a sandbox (%s): install bubblewrap "
            "(apt-get install bubblewrap) to contain the programs they build and run",
            _missing_reason(),
        )


@functools.cache
def _missing_reason() -> str:
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) is not installed"
    return "bubblewrap does not start here (no user namespaces?)"


def _setpriv(uid: int) -> list[str]:
    path = shutil.which("setpriv")
    assert path is not None
    return [path, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all", "--"]


def _bwrap_arguments(bwrap: str) -> list[str]:
    arguments = [
        bwrap, "--unshare-all", "--new-session", "--cap-drop", "ALL",
        "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
    ]  # fmt: skip
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            arguments += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            arguments += ["--ro-bind", path, path]
    for path in [*_SYSTEM_FILES, "/sys"]:
        arguments += ["--ro-bind-try", path, path]
    for device in sorted(Path("/dev").glob("nvidia*")):  # a CUDA worker's GPUs
        arguments += ["--dev-bind", str(device), str(device)]
    for path in _read_only_paths():
        arguments += ["--ro-bind", path, path]
    root = str(scratch_root())
    arguments += ["--bind", root, root, "--chdir", root]
    return arguments


def _read_only_paths() -> list[str]:
    """Python, its packages, autosched's own code and the ``PYTHONPATH`` entries, outermost
    first and none inside another."""
    paths = {sys.prefix, sys.base_prefix, *site.getsitepackages()}
    paths.add(os.path.dirname(os.path.realpath(sys.executable)))
    for name in _PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            paths.update(spec.submodule_search_locations)
    paths.update(entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry)
    real = sorted({os.path.realpath(path) for path in paths if os.path.exists(path)})
    kept: list[str] = []
    for path in real:
        if not any(path == outer or path.startswith(outer + os.sep) for outer in kept):
            kept.append(path)
    return kept


def _readable_by_all(paths: list[str]) -> bool:
    """Whether every path and every directory above it can be read by any user."""
    for path in paths:
        current_path = Path(path)
        for part in [current_path, *current_path.parents]:
            mode = part.stat().st_mode
            if not mode & stat.S_IROTH or (stat.S_ISDIR(mode) and not mode & stat.S_IXOTH):
                return False
    return True


def _works(sandbox: Sandbox) -> bool:
    """Whether Python starts in ``sandbox`` and imports autosched there (the scratch root made
    the sandbox user's for the probe, and given back if it fails)."""
    root = scratch_root()
    if sandbox.uid != os.geteuid():
        os.chown(root, sandbox.uid, sandbox.uid)
    try:
        completed = subprocess.run(
            sandbox.server_command("autosched.errors"),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env=child_environment({}),
            timeout=_PROBE_TIMEOUT_SECS,
            check=False,
        )
        works = completed.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        works = False
    if not works and sandbox.uid != os.geteuid():
        os.chown(root, os.geteuid(), os.getegid())
    return works
