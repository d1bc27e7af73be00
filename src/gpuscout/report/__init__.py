"""Rendering records: terminal tables (rich), JSON and CSV. Nothing here measures."""
