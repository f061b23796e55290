"""Test doubles of the updater's store and ports."""
