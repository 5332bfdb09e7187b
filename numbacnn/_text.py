"""Wording shared by numbacnn's messages: counts with their noun, and how to install a missing extra."""
from __future__ import annotations


def plural(n: int, noun: str, many: str | None = None) -> str:
    """ "1 epoch", "2 epochs" ("many": the plural when it is not noun + "s")."""
    return f"{n} {noun if n == 1 else (many or noun + 's')}"


def install_hint(extra: str) -> str:
    """The commands that install the optional ``extra`` (from PyPI, and in a checkout)."""
    return f"pip install 'numbacnn[{extra}]' (in a checkout: pip install -e '.[{extra}]')"
