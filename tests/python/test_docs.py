"""The ```python blocks of docs/python.md run as written, in order, from the repository root (blocks that import
torch skip without it)."""
import os
import re

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_docs_python_blocks(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    with open(os.path.join(ROOT, "docs", "python.md")) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    assert len(blocks) >= 3
    monkeypatch.chdir(ROOT)
    env = {}
    ran = 0
    for b in blocks:
        if "import torch" in b:
            try:
                import torch  # noqa: F401
            except ImportError:
                continue
        # files the walkthrough writes go to a scratch folder
        b = b.replace('fig.savefig("', 'fig.savefig(r"%s/' % tmp_path)
        exec(compile(b, "docs/python.md", "exec"), env)
        ran += 1
    assert ran >= 2
