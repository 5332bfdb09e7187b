"""Rebuild the kernels shipped with the package (numbacnn/prebuilt.py) after a kernel changes:
``python dev/build_prebuilt.py`` (about a minute per level on 2 cores), ``--status`` to check them."""
import json
import sys

from numbacnn import prebuilt

if __name__ == "__main__":
    if "--status" in sys.argv[1:]:
        print(json.dumps(prebuilt.status(), indent=1))
    else:
        prebuilt.build([a for a in sys.argv[1:] if not a.startswith("-")] or None)
