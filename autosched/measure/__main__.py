"""Entry point of a measuring child process: `python -m autosched.measure FD LIMITS`.

FD is the child's end of a socket pair, LIMITS its resource limits as JSON; see
`autosched.measure.child`.
"""

import sys
from multiprocessing.connection import Connection

from autosched.torch_guard import keep_torch_out

keep_torch_out()  # before TVM is imported: a measuring process never uses PyTorch

from autosched.measure.child import ResourceLimits, serve  # noqa: E402

serve(Connection(int(sys.argv[1])), ResourceLimits.from_argv(sys.argv[2]))
