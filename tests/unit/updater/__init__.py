"""Unit tests of the updater service."""
