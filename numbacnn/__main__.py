"""``python -m numbacnn``: the training command line (same as train.py);
``python -m numbacnn report CHECKPOINT --data PATH --out DIR``: the training report of a saved model;
``python -m numbacnn export CHECKPOINT OUT.onnx``: the saved network as an ONNX model;
``python -m numbacnn predict CHECKPOINT FILE...``: the predicted class of each image;
``python -m numbacnn find-lr --data PATH --arch A``: a suggested learning rate;
``python -m numbacnn summary --arch A --input C,H,W``: the network's layers, parameters and memory;
``python -m numbacnn compile``: the kernels compiled ahead of the first run."""
import sys

from .cli import COMMANDS, main

args = sys.argv[1:]
if args[:1] == ["help"]:  # "help" alone: the training options and the commands; "help CMD": CMD's
    args = [*args[1:2], "--help"]
if args[:1] and args[0] in COMMANDS:
    raise SystemExit(main(args[1:], command=COMMANDS[args[0]]))
raise SystemExit(main(args))
