"""Worker daemons: pull candidates from the tuning service, measure them here, report back."""
