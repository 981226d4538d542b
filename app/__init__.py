"""Lethe: a file lifecycle service. See shared/DESIGN.md for the contract (D1..D18)."""
