"""Importable helpers for jaxlab's tests (and for users testing their own tasks)."""
