"""Peers the suite races that no package provides: written here from their description."""
