"""Alembic environment of the tuning log: runs the migrations on a connection the caller opened.

``TuningLog`` passes it as ``config.attributes["connection"]``, with the name of the table that
holds the revision as ``config.attributes["version_table"]``; there is no offline (SQL) mode.
"""

from alembic import context

from autosched.log.tables import Base

connection = context.config.attributes["connection"]
version_table = context.config.attributes["version_table"]
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    version_table=version_table,
    render_as_batch=connection.dialect.name == "sqlite",  # SQLite alters tables by copying them
)
with context.begin_transaction():
    context.run_migrations()
