"""Alembic environment: runs against the engine the farm passes in (see farm.store.db)."""

from alembic import context

from farm.store.db import make_engine
from farm.store.models import Base

config = context.config
engine = config.attributes.get("connection_engine") or make_engine()

with engine.connect() as connection:
    sqlite = connection.dialect.name == "sqlite"
    if sqlite:  # batch migrations copy a table: its references are checked after, not during
        connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
    context.configure(connection=connection, target_metadata=Base.metadata,
                      render_as_batch=sqlite, compare_type=True)
    with context.begin_transaction():
        context.run_migrations()
    connection.commit()
    if sqlite:
        problems = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
        connection.exec_driver_sql("PRAGMA foreign_keys=ON")
        if problems:
            raise RuntimeError(f"the migration broke {len(problems)} references: {problems[:5]}")
