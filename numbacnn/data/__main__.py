"""``python -m numbacnn.data download mnist|fashion-mnist|kmnist|cifar10 --dir DIR``."""
from .download import main

raise SystemExit(main())
