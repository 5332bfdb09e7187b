"""``python -m numbacnn.data download mnist|fashion-mnist --dir DIR``."""
from .download import main

raise SystemExit(main())
