"""Test doubles of the console's ports."""
