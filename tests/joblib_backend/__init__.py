"""Tests of the joblib backend (a package, so its conftest is not the top-level one)."""
