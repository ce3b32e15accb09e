"""Shared test support (not tests): scripted worlds the fake server plays, and helpers.

See tests/README.md for the map."""
