"""Every Python block of README.md runs, in order, in one namespace (as a reader pastes them), in a
scratch directory: the guide cannot drift from the code."""
import os
import re

import pytest
from conftest import ROOT

README = os.path.join(ROOT, "README.md")


def python_blocks() -> list[str]:
    text = open(README, encoding="utf-8").read()
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_readme_has_python_blocks():
    blocks = python_blocks()
    assert len(blocks) >= 3 and all(b.strip() for b in blocks)


@pytest.mark.slow
def test_every_readme_python_block_runs_in_order(tmp_path, monkeypatch, capsys):
    pytest.importorskip("onnx")  # the export block
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "readme"}
    for i, block in enumerate(python_blocks()):
        try:
            exec(compile(block, f"README.md python block {i + 1}", "exec"), namespace)
        except Exception as e:  # name the block in the failure
            pytest.fail(f"README.md python block {i + 1} failed: {type(e).__name__}: {e}\n{block}")
    assert os.path.exists("model.onnx") and os.path.exists("clf.onnx") and os.path.exists("model.npz")
    printed = capsys.readouterr().out
    assert "parameters:" in printed  # net.summary()
    # the scikit-learn block's cross_val_score(CNNClassifier(random_state=0), X, y, cv=5).mean()
    scores = [float(line) for line in printed.splitlines() if re.fullmatch(r"0\.\d+", line.strip())]
    assert len(scores) == 1 and scores[0] >= 0.97, scores  # README: 0.976


def test_the_readme_is_short_and_its_links_and_the_docs_links_resolve():
    """At most 200 lines (results: one table and links; history lives in docs/performance.md), and
    every relative link of the README and docs/ names a file that exists."""
    import glob

    assert len(open(README, encoding="utf-8").read().splitlines()) <= 200
    broken = []
    for doc in [README, *glob.glob(os.path.join(ROOT, "docs", "*.md"))]:
        for link in re.findall(r"\]\(([^)#\s]+)", open(doc, encoding="utf-8").read()):
            if "://" not in link and not os.path.exists(os.path.join(os.path.dirname(doc), link)):
                broken.append((os.path.relpath(doc, ROOT), link))
    assert broken == []
