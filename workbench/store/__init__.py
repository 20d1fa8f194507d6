"""The store: every run's data in a DuckLake (SQLite or PostgreSQL catalog + Parquet files) that the
engine writes while the dashboard, notebooks and CLI read. The ONLY package in the project with SQL.

    from workbench.store import open_store, StepRecord
    with open_store("store") as store:
        run_id = store.create_run("demo", config={}, seed=0)
        store.write_step(StepRecord(run_id, 0, metrics={...}, rollouts=arrow_table, ...))
        store.rollouts(run_id, step_min=0, limit=50)

See docs/store.md for the tables and columns.
"""

from workbench.store.handle import StoreHandle
from workbench.store.records import StepRecord
from workbench.store.schema import SCHEMA_VERSION, TABLES, arrow_schema
from workbench.store.store import Store, check_read_only_sql, default_store_path, open_store

__all__ = ["SCHEMA_VERSION", "TABLES", "StepRecord", "Store", "StoreHandle", "arrow_schema", "check_read_only_sql",
           "default_store_path", "open_store"]
