"""A target repository that needs its environment made: its tests import ``tinydep``, a package
hero does not have, from a wheel kept in the repository (``wheels/``, so that pip installs it
offline), and ``calc`` itself is installed editable through a build backend of its own
(``_build/``, PEP 660: no setuptools to fetch). Its ``calc.sub`` has a planted bug."""

from __future__ import annotations

import base64
import hashlib
import os
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

#: The interpreter hero's own virtual environment was made from (a sandbox shows it; a
#: version manager's shim on PATH may need more than a sandbox shows).
BASE_PYTHON = shlex.quote(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))
#: The project's setup, as a user declares it.
SETUP = [
    f"{BASE_PYTHON} -m venv .venv",
    ".venv/bin/pip install -q --no-index --find-links wheels -e .",
]
#: The story's check: the project's tests, run by the environment's python.
CHECK = "python -m unittest -q"

BACKEND = '''"""A build backend of the project's own: an editable install is a .pth naming the source."""
import base64, hashlib, os, zipfile

NAME, VERSION = "calc", "0.1"
DIST = f"{NAME}-{VERSION}"
METADATA = f"Metadata-Version: 2.1\\nName: {NAME}\\nVersion: {VERSION}\\nRequires-Dist: tinydep\\n"
WHEEL = "Wheel-Version: 1.0\\nGenerator: calc-backend\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def _wheel(directory, files):
    name = f"{DIST}-py3-none-any.whl"
    files = dict(files)
    files[f"{DIST}.dist-info/METADATA"] = METADATA
    files[f"{DIST}.dist-info/WHEEL"] = WHEEL
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{DIST}.dist-info/RECORD,,")
    files[f"{DIST}.dist-info/RECORD"] = "\\n".join(record) + "\\n"
    with zipfile.ZipFile(os.path.join(directory, name), "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return name


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, {f"{NAME}.pth": os.path.abspath(".") + "\\n"})


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    with open(os.path.join(NAME, "__init__.py")) as f:
        return _wheel(wheel_directory, {f"{NAME}/__init__.py": f.read()})
'''

PYPROJECT = """[build-system]
requires = []
build-backend = "backend"
backend-path = ["_build"]

[project]
name = "calc"
version = "0.1"
dependencies = ["tinydep"]
"""

#: calc.sub with its planted bug, and as fixed
BUGGY = "from tinydep import double\n\n\ndef sub(a, b):\n    return a + b\n\n\ndef twice(x):\n    return double(x)\n"
FIXED = BUGGY.replace("return a + b", "return a - b")

TESTS = """import unittest

from calc import sub, twice


class CalcTest(unittest.TestCase):
    def test_sub(self):
        self.assertEqual(sub(5, 3), 2)

    def test_twice(self):
        self.assertEqual(twice(4), 8)
"""


def _wheel_file(directory: Path) -> Path:
    """tinydep 1.0 as a wheel, made by hand."""
    files = {
        "tinydep/__init__.py": "def double(x):\n    return 2 * x\n",
        "tinydep-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinydep\nVersion: 1.0\n",
        "tinydep-1.0.dist-info/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    record.append("tinydep-1.0.dist-info/RECORD,,")
    files["tinydep-1.0.dist-info/RECORD"] = "\n".join(record) + "\n"
    path = directory / "tinydep-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return path


def make_project(repo: Path) -> str:
    """Turn ``target_repo`` into the project above, committed; returns the commit."""
    (repo / "_build").mkdir()
    (repo / "_build" / "backend.py").write_text(BACKEND)
    (repo / "pyproject.toml").write_text(PYPROJECT)
    (repo / "calc" / "__init__.py").write_text(BUGGY)
    (repo / "tests" / "test_calc.py").write_text(TESTS)
    (repo / "wheels").mkdir()
    _wheel_file(repo / "wheels")
    (repo / ".gitignore").unlink()  # no .gitignore: hero's own rules keep build output out
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "project"],
        cwd=repo,
        check=True,
    )
    out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True)
    return out.stdout.decode().strip()
