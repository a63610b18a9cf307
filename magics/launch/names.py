"""Fresh, readable cluster names: ``brisk-heron``, ``calm-otter-2``."""

from __future__ import annotations

import random
import re

ADJECTIVES = (
    "amber", "bold", "brisk", "calm", "clever", "eager", "fair", "gentle", "keen", "lively", "lucky", "merry",
    "nimble", "proud", "quick", "quiet", "rapid", "sharp", "steady", "sunny", "swift", "vivid", "warm", "wise",
)
ANIMALS = (
    "badger", "bison", "crane", "eagle", "falcon", "ferret", "gecko", "heron", "ibis", "lemur", "lynx", "marten",
    "newt", "otter", "owl", "panda", "puffin", "quail", "raven", "robin", "seal", "stoat", "tapir", "wren",
)
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # whole string: fullmatch (``$`` takes "x\n")


def fresh_name(taken: set[str], rng: random.Random | None = None) -> str:
    rng = rng or random.Random()
    base = f"{rng.choice(ADJECTIVES)}-{rng.choice(ANIMALS)}"
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}-{n}"
    return name


def valid_name(name: str) -> bool:
    """Names become directory names and URL parts: letters, digits, '.', '_', '-'; no '..'."""
    return isinstance(name, str) and bool(NAME_PATTERN.fullmatch(name)) and ".." not in name
