"""The layers of the house (docs/architecture.md): kernels are arithmetic only, the core does not
import what sits above it, and no module rewrites another module's attributes."""
import ast
import os
import subprocess
import sys

from conftest import ROOT

PKG = os.path.join(ROOT, "numbacnn")


def _modules(folder):
    for dirpath, _, files in os.walk(folder):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                with open(path) as fh:
                    yield os.path.relpath(path, ROOT), ast.parse(fh.read())


def _from_module(node, rel):
    """The absolute module of ``from X import ...`` in file rel (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    package = os.path.dirname(rel).replace(os.sep, ".").split(".")
    return ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))


def _imported(tree, rel):
    """Absolute module names a file imports (relative imports resolved against its package)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            mod = _from_module(node, rel)
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)
    return out


def test_kernels_hold_no_classes_and_import_nothing_above_them():
    above = ("numbacnn.backend", "numbacnn.layers", "numbacnn.network", "numbacnn.runtime.program",
             "numbacnn.training", "numbacnn.optimizers")
    for rel, tree in _modules(os.path.join(PKG, "kernels")):
        assert not any(isinstance(n, ast.ClassDef) for n in ast.walk(tree)), rel
        bad = [m for m in _imported(tree, rel) if m.startswith(above)]
        assert not bad, (rel, bad)


# Third-party settings made by assignment, each the one way to make it: numba's CPU features
# (numba.core.config, as numba documents for its settings; an environment variable would also
# switch the prebuilt tier off and reach child processes) and the numpy alias that numba-cuda 0.30
# needs under numpy 2.5 (before its first compile).
THIRD_PARTY_SETTINGS = {(os.path.join("numbacnn", "runtime", "config.py"), "config"),
                        (os.path.join("numbacnn", "kernels", "cuda", "__init__.py"), "_np")}


def test_no_module_sets_another_module_s_attributes():
    """``setattr`` on ``self`` only, and no ``module.name = ...`` on an imported module: a step is
    what its code says, not what a patch made of it (THIRD_PARTY_SETTINGS apart)."""
    for rel, tree in _modules(PKG):
        modules = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                   for a in n.names}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setattr":
                target = node.args[0]
                assert isinstance(target, ast.Name) and target.id == "self", (rel, node.lineno)
            if isinstance(node, (ast.Assign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name):
                        assert t.value.id not in modules or (rel, t.value.id) in THIRD_PARTY_SETTINGS, \
                            (rel, node.lineno, t.value.id)


def test_importing_the_model_imports_neither_benchmark_report_estimator_nor_sklearn():
    code = ("import sys, numbacnn.network, numbacnn.training; "
            "print(' '.join(sorted(m for m in sys.modules if m.startswith(('numbacnn', 'sklearn')))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split()
    for name in ("numbacnn.bench", "numbacnn.report", "numbacnn.analysis", "numbacnn.estimator",
                 "numbacnn.cli", "sklearn"):
        assert name not in out, name
    assert "numbacnn.network" in out  # (the check itself ran)


def _module_name(rel):
    name = rel[:-3].replace(os.sep, ".")
    return name.removesuffix(".__init__")


def _import_graph():
    """{module: the package's modules it imports}, every import counted (inside functions and
    ``if TYPE_CHECKING:`` too); ``from .pkg import x`` points at the submodule x where x is one,
    else at the package."""
    trees = dict(_modules(PKG))
    names = {_module_name(rel) for rel in trees}
    graph = {}
    for rel, tree in trees.items():
        out = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names if a.name in names)
            elif isinstance(node, ast.ImportFrom):
                base = _from_module(node, rel)
                for a in node.names:
                    if f"{base}.{a.name}" in names:
                        out.add(f"{base}.{a.name}")
                    elif base in names:
                        out.add(base)
        out.discard(_module_name(rel))
        graph[_module_name(rel)] = out
    return graph


def test_no_import_circles():
    """Imports run downward only: no module reaches itself through the modules it imports."""
    graph = _import_graph()
    state: dict = {}

    def visit(m, path):
        state[m] = "open"
        for n in sorted(graph.get(m, ())):
            if state.get(n) == "open":
                cycle = path[path.index(n):] + [n]
                raise AssertionError("import circle: " + " -> ".join(cycle))
            if n not in state:
                visit(n, path + [n])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])


def test_no_switch_over_layer_types_outside_the_layers():
    """Code outside numbacnn/layers asks a layer (its methods and class attributes) and never
    tests its class: a new layer then needs no edit elsewhere."""
    from numbacnn.layers import LAYER_TYPES

    names = set(LAYER_TYPES) | {"_Pool2D", "_Elementwise"}
    found = []
    for rel, tree in _modules(PKG):
        if rel.startswith(os.path.join("numbacnn", "layers") + os.sep):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("isinstance", "issubclass"):
                classes = node.args[1] if len(node.args) > 1 else None
                for c in (classes.elts if isinstance(classes, ast.Tuple) else [classes]):
                    name = getattr(c, "id", getattr(c, "attr", None))
                    if name in names:
                        found.append(f"{rel}:{node.lineno} {name}")
    assert found == []


def test_kernels_are_called_one_way_by_their_declared_names():
    """Layers, optimizers and the step programs call a kernel one way, ``backend.run(NAME, ...)``,
    with NAME declared for export on the CPU (``kernel(export=True)``) and as a CUDA launcher
    (``@declare``); no backend offers an operation of a kernel's name, and nothing outside the
    backends calls a kernel as a backend method."""
    from numbacnn.backend.base import Backend
    from numbacnn.backend.cpu import CpuBackend
    from numbacnn.kernels import cpu as K

    cuda_declared = set()
    for _, tree in _modules(os.path.join(PKG, "kernels", "cuda")):
        cuda_declared.update(n.name for n in tree.body if isinstance(n, ast.FunctionDef)
                             and any(getattr(d, "id", "") == "declare" for d in n.decorator_list))
    kernel_names = set(K.__all__)
    runs, as_methods = {}, []
    for rel, tree in _modules(PKG):
        if rel.startswith((os.path.join("numbacnn", "kernels"), os.path.join("numbacnn", "backend"))):
            continue
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr == "run" and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str):
                runs.setdefault(node.args[0].value, f"{rel}:{node.lineno}")
            elif node.func.attr in kernel_names - {"batchnorm_fold"} and \
                    ("backend" in (owner := ast.unparse(node.func.value)) or owner == "be"):
                as_methods.append(f"{rel}:{node.lineno} {ast.unparse(node.func)}")
    assert len(runs) >= 30, sorted(runs)  # the layers' kernels are found, not an empty scan
    assert {n: at for n, at in runs.items() if n not in kernel_names} == {}, "not declared on the CPU"
    assert {n: at for n, at in runs.items() if n not in cuda_declared} == {}, "not declared for CUDA"
    assert as_methods == []
    backends = [Backend, CpuBackend]
    try:
        from numbacnn.backend.cuda import CudaBackend
        backends.append(CudaBackend)
    except ImportError:  # no numba.cuda here: its class is read as source instead
        pass
    offered = sorted(f"{b.__name__}.{n}" for b in backends for n in vars(b) if n in kernel_names)
    assert offered == ["Backend.batchnorm_fold"]  # the fold keeps a device's records (_fold_records)


def test_tuning_is_one_table_each_entry_with_a_reason_and_a_measurement():
    """Every constant of numbacnn/tuning.py has a one-line ``why:`` and a ``measure:`` line that
    benchmarks/tune.py takes (its own name, two values or more, a network and an input that
    build) or a command of its own; the plans hold no thresholds of their own."""
    import shlex

    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import tune
    finally:
        sys.path.pop(0)
    import numbacnn as nc
    from numbacnn import tuning

    found = tune.entries()
    names = [n for n in vars(tuning) if n.isupper()]
    assert sorted(e[0] for e in found) == sorted(names) and len(names) >= 25
    for name, _, why, measure in found:
        assert why and measure, name
        if measure.startswith("python "):
            assert os.path.exists(os.path.join(ROOT, shlex.split(measure)[1])), (name, measure)
            continue
        argv = shlex.split(measure)
        assert argv[0] == name and len([a for a in argv[1:] if not a.startswith("-")]) >= 2, (name, measure)
        arch, shape = argv[argv.index("--arch") + 1], argv[argv.index("--input") + 1]
        nc.build_network(arch, tuple(int(v) for v in shape.split(",")), 10, seed=0)
    for rel in ("backend/cpu.py", "backend/cpu_conv.py", "network.py", "runtime/config.py"):
        tree = ast.parse(open(os.path.join(PKG, rel), encoding="utf-8").read())
        thresholds = [t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
                      if isinstance(t, ast.Name) and t.id.isupper() and isinstance(node.value, ast.Constant)
                      and type(node.value.value) in (int, float)]
        # not tuning: GRAD_PARTS fixes the gradients' summation order (the bits), INFERENCE_PROGRAMS
        # bounds the memory of recorded predictions
        allowed = {"runtime/config.py": ["GRAD_PARTS"], "network.py": ["INFERENCE_PROGRAMS"]}
        assert thresholds == allowed.get(rel, []), (rel, thresholds)


def test_conv_plans_pass_nothing_from_forward_to_backward_and_tests_ask_the_chooser():
    """A convolution plan sets its attributes in ``__init__`` only: what a backward needs is in the
    workspace its forward filled, or asked of the chooser (``WinogradPlan.variant``) for the input
    kept there, never a flag the last forward left. Tests steer the choice through the tuning table,
    not by toggling a plan."""
    import glob
    import re

    for rel in ("backend/cpu_conv.py", "backend/cuda_conv.py"):
        tree = ast.parse(open(os.path.join(PKG, rel), encoding="utf-8").read())
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name != "__init__"):
                for node in ast.walk(fn):
                    targets = node.targets if isinstance(node, ast.Assign) else (
                        [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
                    assert not any(isinstance(t, ast.Attribute) and getattr(t.value, "id", "") == "self"
                                   for t in targets), (rel, cls.name, fn.name, node.lineno)
    for path in glob.glob(os.path.join(ROOT, "tests", "*.py")) + glob.glob(os.path.join(ROOT, ".ci", "*.py")):
        text = open(path, encoding="utf-8").read()
        assert not re.search(r"\.plan\.\w+\s*=[^=]", text), path
