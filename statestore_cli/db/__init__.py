"""The database layer: engines, dialect differences, and the state store's tables and layouts."""
