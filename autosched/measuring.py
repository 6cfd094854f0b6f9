"""Entry point of the fork server of measuring children: `python -m autosched.measuring FD`.

FD is the server's end of its socket pair with the parent; see `autosched.measure.forkserver`. It
lives outside `autosched.measure`, whose package imports TVM, so that PyTorch is kept out before
TVM is imported: a measuring process never uses it.
"""

import socket
import sys

from autosched.torch_guard import keep_torch_out

keep_torch_out()

from autosched.measure.forkserver import run  # noqa: E402

run(socket.socket(fileno=int(sys.argv[1])))
