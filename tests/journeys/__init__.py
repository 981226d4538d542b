"""Journeys: whole paths the way people walk them across features, with the real commands, checking what a person
would see (unlike tests/e2e/, which drives one feature through real processes)."""
