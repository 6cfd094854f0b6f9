"""The `autosched` command line (``main``), its local commands (``tune``, ``costmodel``,
``bench``) and the options they share (``options``)."""
