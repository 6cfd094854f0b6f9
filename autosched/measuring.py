"""Entry point of a measuring child process: `python -m autosched.measuring FD LIMITS`.

FD is the child's end of a socket pair, LIMITS its resource limits as JSON; see
`autosched.measure.child`. It lives outside `autosched.measure`, whose package imports TVM, so
that PyTorch is kept out before TVM is imported: a measuring process never uses it.
"""

import sys
from multiprocessing.connection import Connection

from autosched.torch_guard import keep_torch_out

keep_torch_out()

from autosched.measure.child import ResourceLimits, serve  # noqa: E402

serve(Connection(int(sys.argv[1])), ResourceLimits.from_argv(sys.argv[2]))
