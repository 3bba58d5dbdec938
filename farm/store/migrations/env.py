"""Alembic environment: runs against the engine the farm passes in (see farm.store.db)."""

from alembic import context

from farm.store.db import make_engine
from farm.store.models import Base

config = context.config
engine = config.attributes.get("connection_engine") or make_engine()

with engine.connect() as connection:
    context.configure(connection=connection, target_metadata=Base.metadata,
                      render_as_batch=connection.dialect.name == "sqlite", compare_type=True)
    with context.begin_transaction():
        context.run_migrations()
    connection.commit()
