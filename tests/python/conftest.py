import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
# the package from the source tree, unless one is importable already
try:
    import cattr  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, HERE)
