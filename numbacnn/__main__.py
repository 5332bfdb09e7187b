"""``python -m numbacnn``: the training command line (same as train.py);
``python -m numbacnn report CHECKPOINT --data PATH --out DIR``: the training report of a saved model;
``python -m numbacnn export CHECKPOINT OUT.onnx``: the saved network as an ONNX model;
``python -m numbacnn predict CHECKPOINT FILE...``: the predicted class of each image;
``python -m numbacnn find-lr --data PATH --arch A``: a suggested learning rate;
``python -m numbacnn summary --arch A --input C,H,W``: the network's layers, parameters and memory."""
import sys

from .cli import main, run_export, run_find_lr, run_predict, run_report, run_summary

COMMANDS = {"report": run_report, "export": run_export, "predict": run_predict, "find-lr": run_find_lr,
            "summary": run_summary}

if sys.argv[1:2] and sys.argv[1] in COMMANDS:
    raise SystemExit(main(sys.argv[2:], command=COMMANDS[sys.argv[1]]))
raise SystemExit(main())
