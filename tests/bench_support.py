"""What the tests of `hero bench` share: a project's own test runner that prints pytest's
summary, the worker's commit command, a home answering from the scripted model, a
configuration's overrides file."""

from __future__ import annotations

import json
from pathlib import Path

from hero.llm.scripted import ScriptedModel

#: The scripted worker's commit of its work.
COMMIT = "git add -A && git commit -q -m work"
#: A project's own test runner that prints pytest's ``-rA`` summary lines (stdlib only).
RUNTESTS = """import importlib.util, pathlib, sys
sys.path.insert(0, ".")
for path in sorted(pathlib.Path("tests").glob("test_*.py")):
    rel = path.as_posix()
    try:
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as exc:
        print(f"ERROR {rel} - {exc!r}")
        continue
    for name in sorted(n for n in vars(module) if n.startswith("test_")):
        try:
            getattr(module, name)()
            print(f"PASSED {rel}::{name}")
        except Exception as exc:
            print(f"FAILED {rel}::{name} - {exc!r}")
"""


def make_home(tmp_path: Path, model: ScriptedModel, repo: Path, **knobs: object) -> Path:
    home = tmp_path / "home"
    (home / "config" / "providers").mkdir(parents=True)
    (home / "config" / "providers" / "scripted.yaml").write_text(
        f"name: scripted\nbase_url: {model.base_url}\ndefault_model: scripted-test\n"
    )
    settings: dict[str, object] = {
        "target_repo": str(repo),
        "max_retries": 1,
        "max_parallel": 2,
        "llm_backoff_base_s": 0.01,
        "llm_backoff_max_s": 0.05,
        **knobs,
    }
    lines = [f"{k}: {json.dumps(v)}" for k, v in settings.items()]
    lines += ["worker:", "  provider: scripted", "reviewer:", "  provider: scripted"]
    (home / "config" / "roles.yaml").write_text("\n".join(lines) + "\n")
    return home


def overrides(tmp_path: Path, name: str, text_: str) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text_)
    return f"{name}={path}"
