"""Command line: ``python train.py`` / ``python -m numbacnn`` / ``numbacnn-train``. Parses arguments and
calls the library; exit status 2 for a bad argument, 1 for bad data or a failed run, 130/143 when
interrupted (after saving a resumable checkpoint with --save)."""
from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from . import recipes
from ._files import overwrites
from ._text import plural
from .arch import DEFAULT_ARCH, PRESETS, ArchitectureError, build_network
from .augment import Augment
from .checkpoint import CheckpointError, atomic_write, check_writable, load_checkpoint, save
from .data import DataError, input_files, load_dataset
from .device import DeviceError
from .optimizers import OPTIMIZERS
from .precision import PRECISIONS, describe, describe_unit
from .runconfig import (  # noqa: F401
    DEFAULT_LR,
    RECIPES,
    RunConfig,
    UsageError,
    check_shapes,
    configure,
    data_fingerprint,
    load_data,
)
from .runtime import config as _config
from .training import (
    LR_SCHEDULES,
    Callback,
    DivergenceError,
    EarlyStopping,
    Trainer,
    TrainingInterrupted,
    confusion_matrix,
    evaluate,
)

if TYPE_CHECKING:
    from .distributed import DataParallel

MAX_COUNT = 1_000_000  # the largest --epochs, --batch-size, --threads or patience taken


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage block, status 2
        raise UsageError(message)


def _number(kind, low: float, low_open: bool, high: float | None = None, high_open: bool = False):
    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a valid {kind.__name__}") from None
        if isinstance(v, float) and not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if (v <= low) if low_open else (v < low):
            raise argparse.ArgumentTypeError(f"{text!r} must be {'>' if low_open else '>='} {low}")
        if high is not None and ((v >= high) if high_open else (v > high)):
            raise argparse.ArgumentTypeError(f"{text!r} must be {'<' if high_open else '<='} {high}")
        return v
    return parse


def _sizes(form: str, counts: tuple[int, ...], example: str) -> Callable[[str], tuple[int, ...]]:
    """A parser of comma- (or x-) separated positive sizes, ``counts`` of them, named ``form``."""
    def parse(text: str) -> tuple[int, ...]:
        try:
            dims = tuple(int(v) for v in text.replace("x", ",").split(","))
        except ValueError:
            dims = ()
        if len(dims) not in counts or min(dims) < 1 or max(dims) > 65536:
            raise argparse.ArgumentTypeError(f"{text!r} is not {form} with positive sizes (e.g. {example})")
        return dims
    return parse


def _size(text: str) -> tuple[int, int]:
    dims = _sizes("H or H,W", (1, 2), "32 or 32,48")(text)
    return (dims[0], dims[-1])


def _series_length(text: str) -> int | str:
    if text.strip().lower() == "max":
        return "max"
    return _number(int, 1, False, MAX_COUNT)(text)


def _augment(text: str) -> str:
    try:
        moves = Augment.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return str(moves) if moves is not None else "none"


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="train.py", description="Train a small CNN on MNIST-like data with numbacnn.",
                epilog=SUBCOMMANDS_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    d = p.add_argument_group("data")
    d.add_argument("--data", help="IDX directory or images file, .npz, .csv, an image folder (one "
                   "sub-folder of pictures per class, optionally under train/ and test/), CIFAR-10's "
                   "cifar-10-batches-py/ or a .ts series file (X_TEST.ts read beside X_TRAIN.ts) "
                   "(default: scikit-learn digits, embedded)")
    d.add_argument("--labels", help="IDX labels file for an IDX images file given with --data")
    d.add_argument("--image-size", type=_size, default=None, metavar="H[,W]",
                   help="image folders: resize every picture to H x W (default: the most common size)")
    d.add_argument("--channels", type=int, choices=[1, 3], default=None,
                   help="image folders: 1 (grey) or 3 (RGB) (default: 3 if any picture has colour)")
    d.add_argument("--cache-dir", metavar="DIR", default=None,
                   help="image folders: where the decoded pictures are cached (default: beside the "
                   "folder, as FOLDER.numbacnn-cache.npz)")
    d.add_argument("--series", action="store_true",
                   help=".npz / .csv: the file holds series (N, L) or (N, C, L), not images")
    d.add_argument("--series-length", type=_series_length, default=None, metavar="N|max",
                   help="series of unequal lengths: pad (zeros at the end) or truncate every one to N, "
                   "or to the longest training series")
    d.add_argument("--series-fit", choices=("pad", "resample"), default=None,
                   help="how --series-length fits a series: pad (default) or resample (linear "
                   "interpolation to N evenly spaced points)")
    d.add_argument("--fill-missing", type=_number(float, float("-inf"), True), default=None, metavar="VALUE",
                   help=".ts series: the value put where a value is missing ('?'); without it, an error")
    d.add_argument("--test-size", type=_number(float, 0, True, 1, True), default=0.2,
                   help="held-out test fraction when the data has no test split (default 0.2)")
    d.add_argument("--val-size", type=_number(float, 0, False, 1, True), default=0.0,
                   help="fraction of the training data held out for validation (default 0)")
    m = p.add_argument_group("model and optimizer")
    m.add_argument("--arch", default=None,
                   help=f"preset (auto, {', '.join(PRESETS)}; default {DEFAULT_ARCH}: compact up to "
                   "16x16 images, modern above) or a spec such as "
                   "'conv(32,3),relu,maxpool(2),dense(128),relu'")
    m.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default=None, help="default adam")
    m.add_argument("--lr", type=_number(float, 0, True), default=None,
                   help="learning rate, the peak with onecycle (default: adam/adamw 0.002, 0.004 on images "
                   "above 16x16, sgd 0.05, "
                   "rmsprop 0.001)")
    m.add_argument("--momentum", type=_number(float, 0, False), default=None,
                   help="momentum for sgd (default 0.9) and rmsprop (default 0)")
    m.add_argument("--nesterov", action="store_true", help="Nesterov momentum (sgd)")
    m.add_argument("--weight-decay", type=_number(float, 0, False), default=None,
                   help="L2 weight decay (adamw: decoupled; default 0.01 for adamw, else 0)")
    m.add_argument("--lr-schedule", choices=list(LR_SCHEDULES), default=None,
                   help="constant, cosine annealing over the epochs, onecycle (torch's OneCycleLR, per "
                   "batch) or triangle (airbench's: linear up from 0.2 lr over 23 %% of the steps, then "
                   "down to 0.07 lr) (default: constant on digits, onecycle on images above 16x16, cosine "
                   "otherwise)")
    m.add_argument("--loss", choices=("mse", "huber"), default="mse",
                   help="regression data (a .ts file's @targetLabel): the loss on the standardised targets")
    m.add_argument("--label-smoothing", type=_number(float, 0, False, 1, True), default=None,
                   help="cross-entropy against smoothed targets (1-e) onehot + e/K (default 0.1 on "
                   "images above 16x16, else 0)")
    t = p.add_argument_group("training")
    t.add_argument("--augment", type=_augment, default=None, metavar="TERMS",
                   help="per-batch augmentation of images: shift:N (random translations up to N "
                   "pixels, zero fill), crop:N (pad-and-crop, the same), translate:N (reflect fill), "
                   "flip (left-right at random; for natural images, not digits), flip:alternate (each "
                   "image's side drawn once, swapped every other epoch), comma-separated, e.g. "
                   "crop:4,flip; none for none (default shift:2 on images above 16x16, else none)")
    t.add_argument("--early-stopping", type=_number(int, 1, False, MAX_COUNT), default=0,
                   metavar="PATIENCE",
                   help="stop when the validation loss has not improved for PATIENCE epochs and "
                   "keep (and save) the best epoch's weights; needs --val-size")
    t.add_argument("--batch-size", type=_number(int, 1, False, MAX_COUNT), default=None,
                   help="default 16 on digits, 64 otherwise")
    t.add_argument("--epochs", type=_number(int, 1, False, MAX_COUNT), default=None,
                   help="total epochs (default 25 on digits, 15 on images above 16x16, 10 otherwise)")
    t.add_argument("--seed", type=_number(int, 0, False, 2**63 - 1), default=None,
                   help="seeds initialisation, shuffling, dropout and the split (default 0)")
    t.add_argument("--threads", type=_number(int, 1, False, MAX_COUNT), default=None,
                   help="numba threads (default: all cores)")
    t.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    t.add_argument("--precision", choices=PRECISIONS, default="float32",
                   help="the multiplications: float32 (default) or bf16 (as torch.autocast: float32 "
                   "weights, gradients and loss; bfloat16 operands with float32 sums in the layers with "
                   "bf16 kernels, today 3x3 Winograd F(4x4) convolutions; AMX tiles and AVX512_BF16 where "
                   "the CPU has them, else emulated and slower; the CPU only)")
    t.add_argument("--distributed", action="store_true",
                   help="data-parallel training over MPI ranks: mpiexec -n R python -m mpi4py "
                   "train.py --distributed ...; --batch-size is the global batch, --threads per rank "
                   "(default: the machine's cores divided among its ranks)")
    t.add_argument("--quiet", action="store_true", help="no progress bars, summary or per-epoch lines "
                   "(the result line stays)")
    o = p.add_argument_group("files")
    o.add_argument("--metrics-out", metavar="FILE.json", help="write per-epoch metrics as JSON")
    o.add_argument("--save", metavar="FILE.npz", help="checkpoint after every epoch and on Ctrl-C")
    o.add_argument("--resume", metavar="FILE.npz", help="continue training from a checkpoint to --epochs "
                   "in all; the checkpoints go to FILE.npz itself unless --save names another file")
    o.add_argument("--recipe", choices=tuple(recipes.RECIPES), default=None,
                   help="train with a recipe, which sets its own flags: airbench94, every hyperparameter as "
                   "published (CIFAR-10-style colour 32x32 images: whitening conv, GELU, Lookahead, 9.9 "
                   "epochs at batch 1024, test-time augmentation; --epochs N for a shorter run); resnet8 "
                   "(MLPerf Tiny's ResNet-8: Nesterov SGD 0.1 one-cycle, weight decay 5e-4, batch 128, "
                   "crop:4,flip, label smoothing 0.1, 25 epochs, --tta mirror)")
    o.add_argument("--evaluate", metavar="FILE.npz",
                   help="only evaluate a checkpoint: accuracy and confusion matrix")
    o.add_argument("--tta", choices=("none", "mirror", "mirror-translate"), default="none",
                   help="test-time augmentation of --evaluate and of the accuracy after training: the "
                   "logits averaged over mirrored (and one-pixel translated) views of each test image "
                   "(images only; default none)")
    o.add_argument("--report", metavar="DIR",
                   help="write a training report (DIR/index.html and PNG figures) at the end of "
                   "training, or on Ctrl-C with what exists (needs numbacnn[plot])")
    o.add_argument("--tensorboard", metavar="DIR",
                   help="log each epoch's scalars and weight histograms for TensorBoard "
                   "(needs numbacnn[tensorboard])")
    return p


def _print_confusion(m: np.ndarray, classes: list[str] | None = None) -> None:
    """Rows: true class (index and name), columns: predicted class (index)."""
    width = max(4, len(str(m.max())) + 1)
    names = [n[:20] for n in classes] if classes else [""] * len(m)
    label = max(len(n) for n in names) + 1 if classes else 0
    print("confusion matrix (rows: true class, columns: predicted):")
    print(" " * (4 + label) + "".join(f"{j:>{width}}" for j in range(m.shape[1])))
    for i, row in enumerate(m):
        name = f"{names[i] if i < len(names) else '':<{label}}" if label else ""
        print(f"{i:>3} {name}" + "".join(f"{v:>{width}}" for v in row))


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    dp = _start_distributed(args)
    lead = dp is None or dp.rank == 0  # the rank that prints, reads checkpoints and writes files
    board = _check_args(args, dp, lead)
    if args.recipe in recipes.TRAINER_RECIPES:
        _apply_recipe(args)
    elif args.recipe:
        return _finish(dp, _run_recipe(args, dp))
    if args.evaluate:
        return _finish(dp, _evaluate(args, dp, lead))
    cfg = configure(args, lambda load: _on_lead(dp, load), progress=not args.quiet and lead)
    return _finish(dp, _train(args, cfg, dp, lead, board))


def _check_args(args, dp: DataParallel | None, lead: bool) -> Any:
    """Before any work: inputs exist, outputs can be written, the device and the extras are there;
    returns the TensorBoard logger for --tensorboard (or None)."""
    for flag in ("data", "labels", "resume", "evaluate"):
        path = getattr(args, flag)
        if (path and path != "digits" and (lead or flag in ("data", "labels"))
                and not os.path.exists(path)):
            raise UsageError(f"--{flag}: {path}: no such file or directory")
    if args.precision != "float32" and args.device != "cpu":
        raise UsageError(f"--precision {args.precision} runs on the CPU only (--device {args.device} has "
                         f"float32 kernels only)")
    if args.device == "cuda":
        from .device import require_cuda
        require_cuda()
    if args.threads is not None and dp is None:
        _config.set_num_threads(args.threads)
    for path in (args.save, args.metrics_out):
        if path and lead:
            try:
                check_writable(path)
            except OSError as e:
                raise UsageError(f"cannot write {path}: {e.strerror or e}") from None
    if lead:
        inputs = [("--data", f) for f in input_files(args.data, args.labels)]
        inputs += [(f"--{flag}", getattr(args, flag)) for flag in ("resume", "evaluate")
                   if getattr(args, flag)]
        outputs = {"--save": args.save, "--metrics-out": args.metrics_out, "--report": args.report,
                   "--tensorboard": args.tensorboard}
        _refuse_overwrite(outputs, inputs, allowed=frozenset({("--save", "--resume")}))
    if args.report and lead:
        _check_report_dir(args.report)
    if not (args.tensorboard and lead):
        return None
    from .tensorboard import TensorBoardLogger

    try:
        return TensorBoardLogger(args.tensorboard)
    except ImportError as e:
        raise UsageError(f"--tensorboard: {e}") from None
    except OSError as e:
        raise UsageError(f"--tensorboard: cannot write {args.tensorboard}: {e.strerror or e}") from None


def _refuse_overwrite(outputs: dict[str, str | None], inputs: list[tuple[str, str]],
                      allowed: frozenset[tuple[str, str]] = frozenset()) -> None:
    """A UsageError when an output would overwrite (or write into) one of the run's inputs;
    ``allowed``: (output, input) pairs that may be the same file (--save over --resume)."""
    given = [(flag, os.path.realpath(out)) for flag, out in outputs.items() if out]
    for i, (flag, real) in enumerate(given):
        other = next((f for f, r in given[i + 1:] if r == real), None)
        if other:
            raise UsageError(f"{flag} and {other} name the same file {outputs[flag]}; one would overwrite "
                             f"the other")
    for flag, out in outputs.items():
        hit = overwrites(out, [(n, p) for n, p in inputs if (flag, n) not in allowed]) if out else None
        if out and hit:
            name, path = hit
            inside = os.path.isdir(path) and os.path.realpath(out) != os.path.realpath(path)
            raise UsageError(f"{flag} {out}: {'lies inside' if inside else 'would overwrite'} the "
                             f"input {name} {path}; nothing was written, give another path")


def _evaluate(args, dp: DataParallel | None, lead: bool) -> int:
    """--evaluate: loss, accuracy and the confusion matrix of a checkpoint on the test split."""
    ck = _on_lead(dp, lambda: load_checkpoint(args.evaluate))
    meta = ck.meta.get("training", {})
    ds = load_data(args, meta.get("seed", args.seed or 0), meta.get("test_size", args.test_size),
                   ck.net.input_shape)
    check_shapes(ck.net, ds, args.evaluate)
    _check_tta(args.tta, ds.x_test)
    loss, acc = evaluate(ck.net, ds.x_test, ds.y_test, parallel=dp, tta=args.tta)
    n_classes = ck.net.output_shape(ck.net.input_shape or ds.input_shape)[0]
    matrix = confusion_matrix(ck.net, ds.x_test, ds.y_test, n_classes, parallel=dp)
    if lead:
        with_tta = "" if args.tta == "none" else f" (test-time augmentation {args.tta})"
        print(f"{args.evaluate} on {ds.name} test set ({len(ds.y_test)} images){with_tta}: "
              f"loss {loss:.4f}, accuracy {acc:.4f}")
        _print_confusion(matrix, ck.net.classes or ds.classes)
    return 0


# flags that a recipe sets itself
RECIPE_SETS = ("arch", "optimizer", "lr", "momentum", "weight_decay", "batch_size", "lr_schedule",
               "augment", "label_smoothing", "resume", "early_stopping", "evaluate", "distributed", "report",
               "tensorboard")


def _refuse_clashes(args, flags: Iterable[str]) -> dict[str, Any]:
    """One line naming the flags of ``flags`` that the user gave beside --recipe; else the parser's
    defaults."""
    defaults = vars(build_parser().parse_args([]))  # a flag given, even as 0 (--momentum 0), clashes
    clash = [f"--{k.replace('_', '-')}" for k in flags if getattr(args, k, None) != defaults[k]]
    if clash:
        raise UsageError(f"--recipe {args.recipe} sets {', '.join(clash)} itself: leave "
                         f"{'it' if len(clash) == 1 else 'them'} out")
    return defaults


def _apply_recipe(args) -> None:
    """--recipe of train.py's own flags (recipes.TRAINER_RECIPES): set them, --epochs and --tta
    only where not given; then training runs as with those flags (checkpoints, --resume, report)."""
    settings = recipes.RECIPES[args.recipe]
    defaults = _refuse_clashes(args, [k for k in settings if k not in ("epochs", "tta")])
    vars(args).update({k: v for k, v in settings.items()
                       if k not in ("epochs", "tta") or getattr(args, k) == defaults[k]})


def _run_recipe(args, dp: DataParallel | None) -> int:
    """--recipe airbench94: load the data, train and evaluate as the recipe says; the result line,
    --save, --metrics-out."""
    from .recipes import train_airbench94

    _refuse_clashes(args, RECIPE_SETS)
    if dp is not None:
        raise UsageError(f"--recipe {args.recipe} runs in one process (on --device cpu or cuda)")
    seed = 0 if args.seed is None else args.seed
    ds = load_data(args, seed, args.test_size, progress=not args.quiet)
    if ds.input_shape != (3, 32, 32):
        raise UsageError(f"--recipe {args.recipe} needs colour 32x32 images (CIFAR-10's shape); "
                         f"{ds.name} has {'x'.join(map(str, ds.input_shape))}")
    if not args.quiet:
        where = "the GPU" if args.device == "cuda" else f"{_config.get_num_threads()} threads"
        print(f"numbacnn: {ds.name}: {len(ds.y_train)} train / {len(ds.y_test)} test images; recipe "
              f"{args.recipe}; {where}; {describe_unit(args.precision)}")
    result = train_airbench94(ds.x_train, ds.y_train, ds.x_test, ds.y_test, seed=seed,
                              epochs=args.epochs, progress=not args.quiet, device=args.device,
                              precision=args.precision)
    net = result["net"]
    net.classes = ds.classes
    print(f"done: test accuracy {result.get('test_accuracy', float('nan')):.4f}, "
          f"{result.get('tta_test_accuracy', float('nan')):.4f} with test-time augmentation "
          f"mirror-translate, "
          f"after {result['steps']} steps, {result['seconds']:.1f} s")
    if args.save:
        save(net, args.save)
    if args.metrics_out:
        metrics = {"dataset": ds.name, "recipe": args.recipe, "seed": seed,
                   "threads": _config.get_num_threads(), "precision": args.precision,
                   "steps": result["steps"], "test_accuracy": result.get("test_accuracy"),
                   "tta_test_accuracy": result.get("tta_test_accuracy"), "wall_seconds": result["seconds"],
                   "epochs": result["history"]}
        atomic_write(args.metrics_out, lambda f: f.write(json.dumps(metrics, indent=2).encode()))
    return 0


def _check_tta(mode: str, x: np.ndarray) -> None:
    from .tta import check

    try:
        check(mode, tuple(x.shape[1:]))
    except ValueError as e:
        raise UsageError(f"--tta: {e}") from None


def _train(args, cfg: RunConfig, dp: DataParallel | None, lead: bool, board: Any) -> int:
    """Train as configured: checkpoints, report, metrics; the exit status."""
    net, opt, ds = cfg.net, cfg.opt, cfg.ds
    _check_tta(args.tta, ds.x_test)
    if cfg.regress and (args.report or args.tta != "none"):
        raise UsageError(f"--{'report' if args.report else 'tta'} is for classification; {ds.name} holds "
                         f"regression targets")
    y_test = cfg.test_targets()
    if dp is not None:  # rank 0's parameters and optimizer state everywhere; one compile per machine
        from .distributed import compile_step

        for a in (net.params, *opt.state.values()):
            dp.broadcast_array(a)
        dp.compile_once(lambda: compile_step(net, cfg.x_tr))
    trainer = Trainer(net, opt, batch_size=cfg.batch_size, seed=cfg.seed, progress=not args.quiet and lead,
                      lr_schedule=cfg.schedule, parallel=dp, augment=cfg.augment,
                      label_smoothing=cfg.label_smoothing, loss=args.loss if cfg.regress else "cross_entropy",
                      precision=args.precision)
    trainer.target_scale = cfg.target_scale
    stopper = EarlyStopping(cfg.early_stopping) if cfg.early_stopping else None
    if cfg.trainer_state is not None:
        try:
            trainer.load_state(cfg.trainer_state, len(cfg.x_tr))
        except ValueError as e:
            raise CheckpointError(f"{args.resume}: {e}") from None
        if trainer.epoch >= cfg.epochs:
            if lead:
                print(f"nothing to train: {args.resume} holds {plural(trainer.epoch, 'epoch')} already "
                      f"(--epochs {cfg.epochs} is the total); give a larger --epochs to continue")
            return 0
    save_path = args.save or args.resume

    def checkpoint(tr: Trainer) -> None:
        if save_path and lead:
            save(net, save_path, optimizer=opt, training=cfg.checkpoint_meta(tr.state()))
        if dp is not None:
            dp.barrier()  # the checkpoint is complete before any rank goes on (or exits)

    if not args.quiet and lead:
        ranks = f"{dp.size} ranks x " if dp is not None else ""
        what = "series" if ds.is_series else "images"
        task = f"regression ({args.loss})" if cfg.regress else f"{ds.n_classes} classes"
        print(f"numbacnn: {ds.name}: {len(cfg.y_tr)} train / {len(ds.y_test)} test {what} of shape "
              f"{ds.input_shape}, {task}; arch {cfg.arch}; {opt!r}; batch "
              f"{cfg.batch_size}; {ranks}{_config.get_num_threads()} threads; "
              f"{describe_unit(args.precision)}")
        if args.precision != "float32":
            print(describe(args.precision, net.bf16_layers()))
    if not args.quiet and lead and cfg.trainer_state is None:
        from .summary import summarize

        print(summarize(net, ds.input_shape, cfg.batch_size, cfg.opt_name, memory=net.device == "cpu"))
    first = _FirstEpochRouting(ds.x_test[:REPORT_BATCH]) if args.report and lead else None

    def report() -> int:
        """Write --report (rank 0); 0, or 1 after a one-line error: the model is never lost."""
        if not (args.report and lead):
            return 0
        from .report import ReportError, write_report

        info = {"dataset": ds.name, "architecture": cfg.arch, "optimizer": repr(opt),
                "batch size": cfg.batch_size, "epochs": trainer.epoch,
                "test accuracy": (trainer.history or [{}])[-1].get("test_accuracy")}
        if net.classes:
            info["classes"] = ", ".join(net.classes)
        try:
            page = write_report(args.report, net, ds.x_test, ds.y_test, trainer.history,
                                routing_first=first.stages if first else None, info=info)
        except (ReportError, OSError, ValueError) as e:
            kept = f"; the model is saved in {save_path}" if save_path else ""
            print(f"train.py: error: the report failed: {e}{kept}", file=sys.stderr)
            return 1
        if not args.quiet:
            print(f"report: {page}")
        return 0

    t0 = time.perf_counter()
    try:
        trainer.fit(cfg.x_tr, cfg.y_tr, cfg.epochs, ds.x_test, y_test, cfg.x_val, cfg.y_val,
                    checkpoint=checkpoint,
                    callbacks=[cb for cb in (first, board, stopper) if cb is not None])
    except TrainingInterrupted as e:
        where = f"; resumable checkpoint saved to {save_path}" if save_path else " (no --save given)"
        if lead:
            print(f"train.py: {e} at epoch {trainer.epoch + 1}, step {trainer._step}{where}",
                  file=sys.stderr)
            report()
        return 128 + e.signum
    except DivergenceError as e:
        if dp is None:
            raise
        if lead:  # every rank saw the same reduced loss: an agreed stop
            print(f"train.py: error: {e}", file=sys.stderr)
        return 1
    wall = time.perf_counter() - t0
    final = trainer.history[-1] if trainer.history else {}
    if stopper is not None and stopper.best_state is not None:  # the callback restored the best
        final = next(s for s in trainer.history if s["epoch"] == stopper.best_epoch)
        checkpoint(trainer)  # saves the best epoch's weights (every rank holds them)
        if lead and not args.quiet:
            why = "stopped early" if stopper.stopped else "finished"
            print(f"early stopping: {why}; kept the weights of epoch {stopper.best_epoch} "
                  f"(val loss {stopper.best:.4f})")
    if args.tta != "none" and len(ds.y_test):  # the kept weights' accuracy over the views
        final = dict(final, test_accuracy=evaluate(net, ds.x_test, ds.y_test, parallel=dp, tta=args.tta)[1],
                     tta=args.tta)
    if lead and cfg.regress:  # the result line, --quiet or not
        print(f"done: test rmse {final.get('test_rmse', float('nan')):.4g} r2 "
              f"{final.get('test_r2', float('nan')):.4f} after {plural(trainer.epoch, 'epoch')}, "
              f"{wall:.1f} s")
    elif lead:
        with_tta = f" with test-time augmentation {args.tta}" if "tta" in final else ""
        print(f"done: test accuracy {final.get('test_accuracy', float('nan')):.4f}{with_tta} after "
              f"{plural(trainer.epoch, 'epoch')}, {wall:.1f} s")
    if args.metrics_out and lead:
        keys = ("epoch", "train_loss", "train_accuracy", "test_loss", "test_accuracy", "seconds",
                "images_per_second", "val_loss", "val_accuracy", "test_rmse", "test_mae", "test_r2",
                "val_rmse", "val_mae", "val_r2")
        metrics = {"dataset": ds.name, "architecture": cfg.arch, "optimizer": cfg.opt_name,
                   "hyperparameters": {**opt.hyperparameters(), "lr": trainer.base_lr},
                   "lr_schedule": cfg.schedule, "batch_size": cfg.batch_size,
                   "seed": cfg.seed, "threads": _config.get_num_threads(),
                   "ranks": dp.size if dp is not None else 1, "precision": args.precision,
                   "test_accuracy": final.get("test_accuracy"), "tta": args.tta, "wall_seconds": wall,
                   **({"test_rmse": final.get("test_rmse"), "test_r2": final.get("test_r2")} if cfg.regress
                      else {}),
                   "epochs": [{k: s[k] for k in keys if k in s} for s in trainer.history]}
        atomic_write(args.metrics_out, lambda f: f.write(json.dumps(metrics, indent=2).encode()))
    return report()


REPORT_BATCH = 64  # test examples whose max-pool routing the report shows


class _FirstEpochRouting(Callback):
    """Keeps the max-pool routing of the report batch after the first epoch (the report shows how
    much of it moved by the last)."""

    def __init__(self, x: np.ndarray) -> None:
        self.x = x
        self.stages: list[Any] | None = None

    def on_epoch_end(self, trainer: Trainer, stats: dict[str, Any]) -> None:
        if trainer.epoch == 1:
            from .analysis import routing

            self.stages = routing(trainer.net, self.x)


def _check_report_dir(path: str) -> None:
    """Before training: matplotlib is there and the report directory can be written."""
    from .report import ReportError, require_matplotlib

    try:
        require_matplotlib()
    except ReportError as e:
        raise UsageError(f"--report: {e}") from None
    try:
        os.makedirs(path, exist_ok=True)
        check_writable(os.path.join(path, "index.html"))
    except OSError as e:
        raise UsageError(f"--report: cannot write {path}: {e.strerror or e}") from None


def _start_distributed(args) -> DataParallel | None:
    """MPI data parallelism for --distributed; refuses a multi-rank launch without it (R copies
    would train the same model and overwrite one another's files)."""
    from .distributed import DistributedError, launcher_size, start

    ranks = launcher_size()
    if not args.distributed:
        if ranks is not None and ranks > 1:
            raise UsageError(f"started as {ranks} MPI ranks without --distributed: each would train its "
                             "own copy and overwrite the same files; add --distributed")
        return None
    if args.device != "cpu":
        raise UsageError("--distributed trains on the CPU; drop --device cuda")
    try:
        return start(args.threads)
    except DistributedError as e:
        raise UsageError(str(e)) from None


def _on_lead(dp: DataParallel | None, load: Callable[[], Any]) -> Any:
    """``load()`` here, or on rank 0 only with the result handed to every rank."""
    return load() if dp is None else dp.from_rank0(load)


def _finish(dp: DataParallel | None, status: int) -> int:
    if dp is not None:
        dp.finish()
    return status


def run_report(argv: list[str] | None = None) -> int:
    """``python -m numbacnn report CHECKPOINT --data PATH --out DIR``: the report of a saved model
    (learning curves from the training history the checkpoint holds)."""
    p = _Parser(prog="python -m numbacnn report", description="Write the training report of a checkpoint.")
    p.add_argument("checkpoint", help="a checkpoint written by train.py --save")
    p.add_argument("--data", help="the data it was trained on (default: the embedded digits)")
    p.add_argument("--labels", help="IDX labels file for an IDX images file given with --data")
    p.add_argument("--out", required=True, metavar="DIR", help="the report directory")
    args = p.parse_args(argv)
    for flag, path in (("checkpoint", args.checkpoint), ("--data", args.data)):
        if path and path != "digits" and not os.path.exists(path):
            raise UsageError(f"{flag}: {path}: no such file or directory")
    _refuse_overwrite({"--out": args.out}, [("checkpoint", args.checkpoint),
                                            *[("--data", f) for f in input_files(args.data, args.labels)]])
    _check_report_dir(args.out)
    from .report import write_report

    ck = load_checkpoint(args.checkpoint)
    meta = ck.meta.get("training", {})
    ds = load_data(args, meta.get("seed", 0), meta.get("test_size", 0.2), ck.net.input_shape)
    check_shapes(ck.net, ds, args.checkpoint)
    history = (meta.get("trainer") or {}).get("history")
    info = {"checkpoint": args.checkpoint, "dataset": ds.name, "architecture": ck.net.architecture,
            "epochs": len(history or [])}
    if ck.net.classes:
        info["classes"] = ", ".join(ck.net.classes)
    print(f"report: {write_report(args.out, ck.net, ds.x_test, ds.y_test, history, info=info)}")
    return 0


def run_export(argv: list[str] | None = None) -> int:
    """``python -m numbacnn export CHECKPOINT OUT.onnx``: the saved network as an ONNX model."""
    p = _Parser(prog="python -m numbacnn export", description="Export a checkpoint's network to ONNX.")
    p.add_argument("checkpoint", help="a checkpoint written by train.py --save or nc.save")
    p.add_argument("out", help="the .onnx file to write")
    args = p.parse_args(argv)
    if not os.path.exists(args.checkpoint):
        raise UsageError(f"checkpoint: {args.checkpoint}: no such file or directory")
    _refuse_overwrite({"out": args.out}, [("checkpoint", args.checkpoint)])
    try:
        check_writable(args.out)
    except OSError as e:
        raise UsageError(f"cannot write {args.out}: {e.strerror or e}") from None
    from .onnx_export import to_onnx

    net = load_checkpoint(args.checkpoint).net
    try:
        proto = to_onnx(net)
    except ImportError as e:
        raise UsageError(str(e)) from None
    atomic_write(args.out, lambda f: f.write(proto.SerializeToString()))
    shape = tuple(net.input_shape or ())
    print(f"{args.out}: input 'input' (N, {', '.join(map(str, shape))}) float32, output "
          f"'logits' (N, {net.output_shape(shape)[0]})")
    return 0


def run_summary(argv: list[str] | None = None) -> int:
    """``python -m numbacnn summary --arch SPEC --input C,H,W``: the layer table of a network."""
    from .summary import summarize

    p = _Parser(prog="python -m numbacnn summary",
                description="Print a network's layers, parameters, multiply-adds and step memory.")
    p.add_argument("--arch", default=DEFAULT_ARCH, help="as train.py --arch")
    p.add_argument("--input", type=_sizes("C,H,W or C,L", (2, 3), "1,28,28 or 1,150"), metavar="C,H,W",
                   help="per-example input shape, images C,H,W or series C,L (needed with --arch; default "
                   "with --checkpoint: its own)")
    p.add_argument("--classes", type=_number(int, 2, False, MAX_COUNT), default=10,
                   help="output classes (default 10)")
    p.add_argument("--batch-size", type=_number(int, 1, False, MAX_COUNT), default=64,
                   help="batch of the measured training step (default 64)")
    p.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default="adam")
    p.add_argument("--checkpoint", help="summarise a saved network instead of --arch")
    args = p.parse_args(argv)
    if args.checkpoint:
        if not os.path.exists(args.checkpoint):
            raise UsageError(f"--checkpoint: {args.checkpoint}: no such file or directory")
        net = load_checkpoint(args.checkpoint).net
    elif args.input is None:
        raise UsageError("--input C,H,W is needed with --arch (e.g. --input 1,28,28)")
    else:
        net = build_network(args.arch, args.input, args.classes, seed=0)
    print(f"{net.architecture}:" if net.architecture else "network:")
    print(summarize(net, args.input, args.batch_size, args.optimizer))
    return 0


def run_find_lr(argv: list[str] | None = None) -> int:
    """``python -m numbacnn find-lr --data ... --arch ...``: the learning-rate finder."""
    from .lr_finder import find_lr

    p = _Parser(prog="python -m numbacnn find-lr",
                description="Suggest a learning rate: an exponential ramp over a few hundred steps.")
    p.add_argument("--data", help="as train.py --data (default: the embedded digits)")
    p.add_argument("--labels", help="IDX labels file for an IDX images file given with --data")
    p.add_argument("--arch", default=DEFAULT_ARCH, help="as train.py --arch")
    p.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default="adam")
    p.add_argument("--batch-size", type=_number(int, 1, False, MAX_COUNT), default=64)
    p.add_argument("--steps", type=_number(int, 10, False, MAX_COUNT), default=200)
    p.add_argument("--start-lr", type=_number(float, 0, True), default=1e-7)
    p.add_argument("--end-lr", type=_number(float, 0, True), default=10.0)
    p.add_argument("--augment", type=_augment, default=None, help="as train.py --augment")
    p.add_argument("--seed", type=_number(int, 0, False, 2**63 - 1), default=0)
    p.add_argument("--threads", type=_number(int, 1, False, MAX_COUNT), default=None)
    p.add_argument("--plot", metavar="FILE.png", help="save loss against learning rate (needs [plot])")
    args = p.parse_args(argv)
    if args.start_lr >= args.end_lr:
        raise UsageError(f"--start-lr {args.start_lr} must be below --end-lr {args.end_lr}")
    if args.plot:
        from .report import require_matplotlib

        require_matplotlib()
        _refuse_overwrite({"--plot": args.plot}, [("--data", f) for f in input_files(args.data, args.labels)])
        try:
            check_writable(args.plot)
        except OSError as e:
            raise UsageError(f"cannot write {args.plot}: {e.strerror or e}") from None
    if args.data and not os.path.exists(args.data):
        raise UsageError(f"--data: {args.data}: no such file or directory")
    _config.set_num_threads(args.threads)
    ds = load_dataset(args.data, labels=args.labels, seed=args.seed)
    net = build_network(args.arch, ds.input_shape, ds.n_classes, seed=args.seed)
    found = find_lr(net, ds.x_train, ds.y_train, args.optimizer, args.batch_size, args.start_lr,
                    args.end_lr, args.steps, args.seed, args.augment)
    for lr, loss in list(zip(found.lrs, found.losses))[::max(1, len(found.lrs) // 12)]:
        print(f"lr {lr:9.2e}  loss {loss:.4f}")
    end = "diverged" if found.stopped_early else "reached --end-lr"
    if math.isfinite(found.suggestion):
        print(f"{len(found.lrs)} steps ({end}); suggested lr: {found.suggestion:.2g} (steepest fall "
              f"of the loss; a common choice for one-cycle's peak is up to 10x that)")
    else:
        print(f"{len(found.lrs)} steps ({end}); no suggestion: the loss did not fall over the ramp "
              f"(try more --steps or a lower --start-lr)", file=sys.stderr)
    if args.plot:
        found.plot(args.plot)
        print(f"plot: {args.plot}")
    return 0 if math.isfinite(found.suggestion) else 1


def run_predict(argv: list[str] | None = None) -> int:
    """``python -m numbacnn predict CHECKPOINT FILE... [--out CSV]``: one line per image (file, label,
    probability); a bad file gets one line on stderr and the others are still predicted (exit 1)."""
    from .predict import load_images

    p = _Parser(prog="python -m numbacnn predict", description="Predict the class of images.")
    p.add_argument("checkpoint", help="a checkpoint written by train.py --save or nc.save")
    p.add_argument("files", nargs="+", help="PNG / JPEG / ... pictures, .npy, IDX, .npz or .csv files "
                   "(series models: .ts, .npy, .npz, .csv)")
    p.add_argument("--out", metavar="FILE.csv", help="write file,label,probability rows here")
    p.add_argument("--tta", choices=("none", "mirror", "mirror-translate"), default="none",
                   help="test-time augmentation: average the logits over mirrored (and translated) views")
    args = p.parse_args(argv)
    if not os.path.exists(args.checkpoint):
        raise UsageError(f"checkpoint: {args.checkpoint}: no such file or directory")
    if args.out:
        _refuse_overwrite({"--out": args.out}, [("checkpoint", args.checkpoint),
                                                *[("file", f) for f in args.files]])
        try:
            check_writable(args.out)
        except OSError as e:
            raise UsageError(f"cannot write {args.out}: {e.strerror or e}") from None
    net = load_checkpoint(args.checkpoint).net
    if net.input_shape is None:
        raise CheckpointError(f"{args.checkpoint}: the network does not record its input shape")
    shape = tuple(net.input_shape)
    _check_tta(args.tta, np.zeros((1, *shape), np.float32))
    rows: list[tuple[str, Any, float | None]] = []
    failed = 0
    for path in args.files:
        try:
            images = load_images(path, shape)  # type: ignore[arg-type]
        except DataError as e:
            print(f"predict: {e}", file=sys.stderr)
            failed += 1
            continue
        batch = np.ascontiguousarray(np.stack([a for _, a in images]), np.float32)
        if net.target_scale is not None:  # regression: the outputs in the targets' units
            mean, std = net.target_scale
            values = np.asarray(net.forward(batch), np.float64) * std + mean
            rows += [(name, ",".join(f"{v:.6g}" for v in row), None)
                     for (name, _), row in zip(images, values)]
            continue
        if args.tta == "none":
            proba = net.predict_proba(batch)
        else:
            from .tta import logits as tta_logits

            z = tta_logits(net, batch, args.tta).astype(np.float64)
            z = np.exp(z - z.max(axis=1, keepdims=True))
            proba = z / z.sum(axis=1, keepdims=True)
        for (name, _), pr in zip(images, proba):
            k = int(pr.argmax())
            rows.append((name, net.classes[k] if net.classes and k < len(net.classes) else k,
                         float(pr.max())))
    if args.out:
        import csv
        import io

        buf = io.StringIO()
        if net.target_scale is not None:
            csv.writer(buf).writerows([("file", "prediction"), *[r[:2] for r in rows]])
        else:
            csv.writer(buf).writerows([("file", "label", "probability"), *rows])
        atomic_write(args.out, lambda f: f.write(buf.getvalue().encode()))
    else:
        for name, label, prob in rows:
            print(f"{name}\t{label}" + ("" if prob is None else f"\t{prob:.4f}"))
    return 1 if failed else 0


def main(argv: list[str] | None = None, command: Callable[[list[str] | None], int] = run) -> int:
    """Run ``command`` (training, or ``run_report``, ...) with one-line errors and exit statuses:
    0 success, 1 bad data / checkpoint / failed run, 2 bad command line, 130 / 143 interrupted,
    141 when the reader of the output went away (``| head -1``)."""
    from .report import ReportError

    prog = PROGS.get(command, "train.py")
    try:
        status = command(argv)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return status
    except UsageError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except ArchitectureError as e:
        print(f"{prog}: error: --arch: {e}", file=sys.stderr)
        return 2
    except (DataError, CheckpointError, DeviceError, DivergenceError, ReportError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C outside the training loop (loading, compiling)
        print(f"{prog}: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    except BrokenPipeError:
        # nothing is left to tell the reader; what is still buffered goes nowhere, quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except OSError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 1
    except MemoryError:
        print(f"{prog}: error: out of memory (a smaller --batch-size, --image-size or network may fit)",
              file=sys.stderr)
        return 1


def run_compile(argv: list[str] | None = None) -> int:
    """``python -m numbacnn compile``: the kernels compiled ahead of the first run."""
    from .runtime.compile import main as compile_main

    return compile_main(argv)


# the subcommands of ``python -m numbacnn`` (training is the default)
COMMANDS: dict[str, Callable[[list[str] | None], int]] = {
    "summary": run_summary, "find-lr": run_find_lr, "predict": run_predict, "export": run_export,
    "report": run_report, "compile": run_compile}
PROGS: dict[Callable[[list[str] | None], int], str] = {
    f: f"python -m numbacnn {name}" for name, f in COMMANDS.items()}
SUBCOMMANDS_HELP = """commands (python -m numbacnn COMMAND --help for each):
  (none)     train, as train.py: the options above
  summary    a network's layers, parameters, mult-adds and memory
  find-lr    a suggested learning rate (the loss over a rising learning rate)
  predict    the predicted class of each image in a file
  export     a checkpoint as an ONNX model
  report     the training report (HTML) of a checkpoint
  compile    compile the kernels ahead of the first run (1-3.5 minutes on 2 cores)"""


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
