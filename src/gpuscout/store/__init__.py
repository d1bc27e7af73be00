"""The results store: SQLite, schema-versioned, safe with several writers."""

from gpuscout.record.run import SCHEMA_VERSION
from gpuscout.store.failures import StoreError
from gpuscout.store.sqlite import Store, default_store_path

__all__ = ["SCHEMA_VERSION", "Store", "StoreError", "default_store_path"]
