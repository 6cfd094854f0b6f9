"""The API's route groups, one module per resource, each with its ``router``."""
