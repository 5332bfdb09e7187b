"""``python -m numbacnn``: the training command line (same as train.py); ``python -m numbacnn report
CHECKPOINT --data PATH --out DIR``: the training report of a saved model."""
import sys

from .cli import main, run_report

if sys.argv[1:2] == ["report"]:
    raise SystemExit(main(sys.argv[2:], command=run_report))
raise SystemExit(main())
