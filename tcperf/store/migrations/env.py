"""Alembic's entry point for tcperf's store: run on the connection tcperf.store.migrate hands over (never a URL
from a config file), so the same code upgrades a SQLite file and a PostgreSQL server."""
from alembic import context

from tcperf.store.schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
