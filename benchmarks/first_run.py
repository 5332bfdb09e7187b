"""What a new user waits for: a fresh clone, ``pip install -e .``, then ``python train.py`` twice,
with and without ``python -m numbacnn compile`` first, for each Python named.

Usage: python benchmarks/first_run.py [--compile] python3.11 python3.12 python3.13
Each Python gets its own clone of this checkout's HEAD and its own virtual environment (pip
installs numba and the other dependencies from the package index); every time printed is the wall
time of one command, measured once (a first run is cold only once). Prints one JSON line per
Python. A developer's tool, not part of the package.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def timed(cmd: list[str], cwd: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed in {cwd}:\n{r.stderr[-2000:]}")
    return time.perf_counter() - t0, r.stdout + r.stderr


def main() -> None:
    args = sys.argv[1:]
    compile_first = "--compile" in args
    for py in [a for a in args if not a.startswith("--")]:
        d = os.path.join(tempfile.mkdtemp(prefix="numbacnn-first-run-"), "numbacnn")
        subprocess.run(["git", "clone", "-q", ROOT, d], check=True)
        subprocess.run([py, "-m", "venv", ".venv"], cwd=d, check=True)
        bin_ = os.path.join(d, ".venv", "bin")
        subprocess.run([os.path.join(bin_, "python"), "-m", "pip", "install", "-q", "--upgrade", "pip"],
                       cwd=d, check=True)
        out: dict = {"python": py}
        out["install_s"], _ = timed([os.path.join(bin_, "pip"), "install", "-q", "-e", "."], d)
        version = subprocess.run([os.path.join(bin_, "python"), "-c",
                                  "import sys, numba; print(sys.version.split()[0], numba.__version__)"],
                                 capture_output=True, text=True, cwd=d).stdout.split()
        out["python_version"], out["numba"] = version
        if compile_first:
            out["compile_s"], _ = timed([os.path.join(bin_, "python"), "-m", "numbacnn", "compile"], d)
        out["first_run_s"], log = timed([os.path.join(bin_, "python"), "train.py"], d)
        out["first_run_notice"] = [line for line in log.splitlines() if "compiling" in line]
        out["second_run_s"], log = timed([os.path.join(bin_, "python"), "train.py"], d)
        out["result"] = [line for line in log.splitlines() if "accuracy" in line][-1:]
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
