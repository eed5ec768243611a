"""PySpark data source for Laminar (comes with the Spark issue)."""
