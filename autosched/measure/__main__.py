"""Entry point of a measuring child process: `python -m autosched.measure FD`.

FD is the child's end of a socket pair; see `autosched.measure.child`.
"""

import sys
from multiprocessing.connection import Connection

from autosched.measure.child import serve

serve(Connection(int(sys.argv[1])))
