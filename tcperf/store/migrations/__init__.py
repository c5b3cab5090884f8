"""Alembic's migrations of the results store's schema (tcperf.store.migrate runs them); one file a version."""
