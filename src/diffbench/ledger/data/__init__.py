"""Built-in catalog data (catalog.yaml)."""
