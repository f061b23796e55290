"""NATS subject wildcard rules, written out independently of ``lockstep_common.topology``.

The tests check the library's routing against these rules rather than against itself: ``*``
matches exactly one token, ``>`` one or more trailing tokens (nats.docs, subjects).
"""

from __future__ import annotations


def matches(pattern: str, subject: str) -> bool:
    """Whether the concrete ``subject`` is matched by ``pattern``."""
    p_tokens, s_tokens = pattern.split("."), subject.split(".")
    for index, p in enumerate(p_tokens):
        if p == ">":
            return index == len(p_tokens) - 1 and len(s_tokens) > index
        if index >= len(s_tokens):
            return False
        if p not in ("*", s_tokens[index]):
            return False
    return len(p_tokens) == len(s_tokens)


def overlap(a: str, b: str) -> bool:
    """Whether some concrete subject is matched by both patterns (JetStream refuses that)."""
    a_tokens, b_tokens = a.split("."), b.split(".")
    for index in range(max(len(a_tokens), len(b_tokens))):
        x = a_tokens[index] if index < len(a_tokens) else None
        y = b_tokens[index] if index < len(b_tokens) else None
        if x == ">" or y == ">":
            return x is not None and y is not None
        if x is None or y is None:
            return False
        if x != y and "*" not in (x, y):
            return False
    return True
