"""The farm's Alembic environment (env.py, script.py.mako, versions/), shipped as a top-level
package so that farm.store.db finds it with importlib wherever the farm is installed."""
