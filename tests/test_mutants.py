"""dev/mutants.py's planted bugs still apply to the sources: each one's text is found inside the
function it names, so an edit that moves or rewrites that code shows here, not hours into a run."""
import importlib.util
import os
import sys

import pytest
from conftest import ROOT

spec = importlib.util.spec_from_file_location("mutants", os.path.join(ROOT, "dev", "mutants.py"))
mutants = sys.modules["mutants"] = importlib.util.module_from_spec(spec)  # (its dataclass looks there)
spec.loader.exec_module(mutants)


@pytest.mark.parametrize("m", mutants.MUTANTS, ids=lambda m: m.name[:60])
def test_every_planted_bug_still_applies_where_it_says(m):
    for rel in (m.path,) if isinstance(m.path, str) else m.path:
        with open(os.path.join(ROOT, rel)) as f:
            src = f.read()
        planted = mutants.plant(m, src)
        assert planted is not None, f"{m.inside or 'the text'} in {rel} no longer holds the mutant's text"
        assert planted != src
    assert os.path.exists(os.path.join(ROOT, m.tests[0])), m.tests


def test_a_mutant_changes_only_the_function_it_names():
    src = "def f():\n    return 1\n\n\nclass C:\n    def g(self):\n        return 1\n"
    M = mutants.Mutant
    assert mutants.plant(M("g", "x.py", "return 1", "return 2", ["t"], inside="C.g"), src) == \
        src.replace("        return 1", "        return 2")
    assert mutants.plant(M("f", "x.py", "return 1", "return 2", ["t"]), src).count("return 2") == 1
    assert mutants.plant(M("h", "x.py", "return 1", "return 2", ["t"], inside="h"), src) is None
    assert mutants.plant(M("g", "x.py", "return 3", "return 2", ["t"], inside="C.g"), src) is None


def test_a_kernel_mutant_recompiles_the_changed_file_and_every_file_importing_it(tmp_path):
    for name, text in {"a.py": "x = 1\n", "b.py": "from .a import x\n", "c.py": "from ._u import (\n    y)\n",
                       "d.py": "from .b import x\nfrom .c import y\n", "_u.py": "y = 2\n",
                       "__init__.py": "from .d import x\n"}.items():
        (tmp_path / name).write_text(text)
    assert mutants.kernel_dependents(str(tmp_path), {"a"}) == {"a", "b", "d"}
    assert mutants.kernel_dependents(str(tmp_path), {"_u"}) == {"_u", "c", "d"}
    assert mutants.kernel_dependents(str(tmp_path), {"d"}) == {"d"}
    folder = os.path.join(ROOT, mutants.K)  # the real kernels: a shared helper reaches the convolutions
    shared = mutants.kernel_dependents(folder, {"microkernel"})
    assert {"conv2d_winograd", "conv2d_positions", "dense"} <= shared
    assert mutants.kernel_dependents(folder, {"dropout"}) == {"dropout"}
