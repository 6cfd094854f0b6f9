"""What tuning exports: a kernel's best schedule as TVMScript, a MetaSchedule database or a
library (``kernels``), a whole model as a library or a database (``models``), each library with
the manifest ``autosched.runtime`` loads it by (``manifest``). The tuning log's own export, a
portable file of measurements, is ``autosched.log.portable``."""
