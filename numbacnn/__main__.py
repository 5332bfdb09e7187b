"""``python -m numbacnn``: the training command line (same as train.py)."""
from .cli import main

raise SystemExit(main())
