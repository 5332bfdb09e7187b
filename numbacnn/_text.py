"""Wording shared by numbacnn's messages: counts with their noun, how to install a missing extra,
and whether progress may be drawn live."""
from __future__ import annotations

import sys


def plural(n: int, noun: str, many: str | None = None) -> str:
    """ "1 epoch", "2 epochs" ("many": the plural when it is not noun + "s")."""
    return f"{n} {noun if n == 1 else (many or noun + 's')}"


def install_hint(extra: str) -> str:
    """The commands that install the optional ``extra`` (from PyPI, and in a checkout)."""
    return f"pip install 'numbacnn[{extra}]' (in a checkout: pip install -e '.[{extra}]')"


def interactive() -> bool:
    """Whether stderr is a terminal: live progress bars there, one line per epoch elsewhere
    (a log file or a CI log would otherwise get every refresh of the bar)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed streams
        return False
