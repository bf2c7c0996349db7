"""The package's layout rules, checked from its source: imports point down, never in a circle,
and no file grows past its size.

LAYERS below is the one place the layer rule lives. A module may import modules of its own
layer and of the layers below it, never one above. Every module must sit in a layer: a new
module that matches no pattern fails here until its author places it.

SIZES below holds the sizes: no module over MAX_MODULE_LINES lines, at most
MAX_TOP_LEVEL_MODULES modules loose in ``src/hero/`` (the records and foundations every layer
uses; everything else lives in the package of its subject), and the few pieces that grow
back when nothing holds them (the round loop, the agent loop, the command line).
"""

from __future__ import annotations

import ast
from collections.abc import Container, Mapping
from pathlib import Path

import pytest
from helpers import REPO_ROOT

SRC = REPO_ROOT / "src"

#: Top to bottom. ``name`` matches that module only; ``name.*`` matches the package ``name``
#: and every module inside it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("hero.cli", "hero.__main__"),  # 1  entry point: assembles the commands, maps errors to exits
    ("hero.commands.*",),  # 2  one module per command: its arguments, what it prints, its exit
    # 3  what the commands share and the services only a command calls: running one story and
    #    whether it may run, `hero run --task`'s story, `hero run --dry-run`'s account of a run,
    #    the demo's home and model, `hero init`'s scaffold and what it proposes for the target
    #    repository's setup and checks, the reference pages, drafting and writing a plan, the
    #    pre-flight checks (`hero doctor`, and `hero watch` and `hero worker` at start)
    (
        "hero.run.launch",
        "hero.run.adhoc",
        "hero.run.dryrun",
        "hero.run.demo",
        "hero.config.scaffold",
        "hero.config.detect",
        "hero.config.settings_doc",
        "hero.plans.drafting",
        "hero.doctor.*",
        # `hero bench`: tasks from history, runs under configurations
        "hero.evals.make",
        "hero.evals.runner",
        "hero.evals.dispatch",
        "hero.evals.judge",
        "hero.evals.guard",
    ),
    # 4  what `hero status` / `hero logs` show, `hero export`'s JSONL, `hero report`'s Markdown;
    #    `hero serve`'s pages, API and metrics (read-only, like them); `hero bench report`
    #    and what it reads (the tasks, results and folders files, the statistics), which the
    #    status page shows too
    (
        "hero.views.*",
        "hero.web.*",
        "hero.evals.report",
        "hero.evals.results",
        "hero.evals.stats",
        "hero.evals.tasks",
        "hero.evals.folders",
    ),
    # 5  scheduling, the inbox watcher; the Celery engine (stories sent to `hero worker`
    #    processes, which run the pipeline)
    ("hero.daemon.*", "hero.engine.*"),
    # 6  the round loop for one story and its record; how a run starts; the story's repository
    #    and sandboxes; what of finished stories may go
    (
        "hero.run.pipeline",
        "hero.run.record",
        "hero.run.start",
        "hero.run.revision",
        "hero.run.workspace",
        "hero.run.environment",
        "hero.run.baseline",
        "hero.run.housekeeping",
        "hero.run.keepup",
    ),
    ("hero.roles.*",),  # 7  worker, verifier, reviewer, planner, learner: one job each; prompts
    # 8  plans: the manifest, the DAG, the dependency gate, finishing a plan (roles.planner
    #    checks its DAG; finishing merges branches through git, below)
    ("hero.plans.*",),
    ("hero.agent.*",),  # 9  the tool-calling loop and its tools
    (  # 10 the outside world: model, git, GitHub (its client, intake, report-back and
        #    watcher), the sandbox, processes, traces, locks, memory; a run's budgets, events,
        #    cancelling and alerts
        "hero.llm.client",
        "hero.llm.transport",
        "hero.git.*",
        "hero.github.*",
        "hero.runner",
        "hero.leftovers",
        "hero.sandbox.bwrap",
        "hero.sandbox.session",
        "hero.trace",
        "hero.locks",
        "hero.memory.*",
        "hero.run.budget",
        "hero.run.events",
        "hero.run.cancel",
        "hero.run.notify",
    ),
    (  # 11 the records hero reads and writes
        "hero.config.loader",
        "hero.config.mcp",
        "hero.config.tools",
        "hero.config.home",
        "hero.config.keys",
        "hero.config.sections",
        "hero.config.project",
        "hero.config.providers",
        "hero.config.schema",
        "hero.config.overrides",
        "hero.config.tools",
        "hero.story.*",
        "hero.state",
        "hero.llm.models",
        "hero.llm.usage",
        "hero.llm.breaker",
    ),
    (  # 12 foundations; the subject packages themselves (each a docstring)
        "hero",
        "hero.errors",
        "hero.names",
        "hero.yamlio",
        "hero.fsio",
        "hero.redact",
        "hero.config",
        "hero.config.settings",
        "hero.sandbox",
        "hero.sandbox.limits",
        "hero.sandbox.pid1",
        "hero.llm",
        "hero.llm.scripted",
        "hero.llm.refusals",
        "hero.run",
        "hero.evals",
    ),
)

#: The longest module, in lines: a file past it holds more than one subject.
MAX_MODULE_LINES = 900
#: Modules loose in src/hero/ (``__init__.py`` aside): the records and foundations.
MAX_TOP_LEVEL_MODULES = 14
#: ``module:qualified name`` -> the most lines its definition may take.
SIZES = {
    "hero.run.pipeline:StoryRun": 400,  # the round loop; the record is hero.run.record's
    "hero.agent.loop:run_agent": 70,  # the agent loop, readable in one screen
}
#: Modules held to a size of their own: the command line parses, calls one command, exits.
MODULE_SIZES = {"hero.cli": 80}

Graph = Mapping[str, Mapping[str, int]]  # module -> {imported hero module: first line}


# ----------------------------------------------------------------------------- reading


def module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def read_graph(src: Path, package: str = "hero") -> dict[str, dict[str, int]]:
    """Every module of ``package`` under ``src`` and the package modules it imports.

    All imports count, wherever they stand (inside functions, under TYPE_CHECKING).
    ``from a.b import c`` is an import of ``a.b.c`` when that is a module, else of ``a.b``.
    """
    files = {module_name(p, src): p for p in sorted((src / package).rglob("*.py"))}
    graph: dict[str, dict[str, int]] = {}
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(node.module, node.level, name, is_package)
                targets = [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            for target in targets:
                found = _known(target, files)
                if found is not None and found != name:
                    edges.setdefault(found, node.lineno)
        graph[name] = edges
    return graph


def _absolute(module: str | None, level: int, importer: str, is_package: bool) -> str:
    if level == 0:
        return module or ""
    parts = importer.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


def _known(target: str, modules: Container[str]) -> str | None:
    """The longest known module that ``target`` is or lies in (``a.b.func`` -> ``a.b``)."""
    parts = target.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


# ----------------------------------------------------------------------------- checking


def layer_of(module: str) -> int | None:
    """1-based layer number (1 is the top), or None when no pattern matches."""
    for number, patterns in enumerate(LAYERS, start=1):
        for pattern in patterns:
            if pattern.endswith(".*"):
                package = pattern[:-2]
                if module == package or module.startswith(package + "."):
                    return number
            elif module == pattern:
                return number
    return None


def unplaced(graph: Graph) -> list[str]:
    return [
        f"{module} matches no layer: add it to LAYERS in tests/test_architecture.py, in the "
        "layer whose modules it may import (its own and those below)"
        for module in sorted(graph)
        if layer_of(module) is None
    ]


def upward_imports(graph: Graph) -> list[str]:
    problems = []
    for module in sorted(graph):
        own = layer_of(module)
        for target, line in sorted(graph[module].items()):
            theirs = layer_of(target)
            if own is not None and theirs is not None and theirs < own:
                problems.append(
                    f"{module} (layer {own}) imports {target} (layer {theirs}, above it) "
                    f"at line {line}"
                )
    return problems


def cycles(graph: Graph) -> list[str]:
    """One example cycle per strongly connected group of modules, as ``a -> b -> a``."""
    found = []
    for group in _strongly_connected(graph):
        if len(group) > 1:
            found.append(" -> ".join(_cycle_through(min(group), group, graph)))
    return sorted(found)


def _strongly_connected(graph: Graph) -> list[set[str]]:
    # Tarjan's algorithm, iterative so a long import chain cannot hit the recursion limit.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, {}))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, {})))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                groups.append(group)
    return groups


def _cycle_through(start: str, group: set[str], graph: Graph) -> list[str]:
    """A shortest path start -> ... -> start inside ``group`` (breadth first)."""
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph.get(node, {})):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if child in group and child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"{start} is in a cycle group but no cycle was found")


def module_lines(src: Path, package: str = "hero") -> dict[str, int]:
    """Every module of ``package`` under ``src`` and its length in lines."""
    return {
        module_name(path, src): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted((src / package).rglob("*.py"))
    }


def oversized(
    lines: Mapping[str, int],
    limit: int = MAX_MODULE_LINES,
    own: Mapping[str, int] = MODULE_SIZES,
) -> list[str]:
    """The modules longer than their limit (``own``'s, else ``limit``)."""
    return [
        f"{module} has {n} lines, over its limit of {own.get(module, limit)}: split it along "
        "its subjects"
        for module, n in sorted(lines.items())
        if n > own.get(module, limit)
    ]


def loose_modules(src: Path, package: str = "hero") -> list[str]:
    """The modules directly in the package's folder, ``__init__`` aside."""
    return sorted(p.stem for p in (src / package).glob("*.py") if p.name != "__init__.py")


def definition_lines(src: Path, where: str) -> int | None:
    """The lines the definition ``module:Name`` (``Name.method`` inside a class) takes, or
    None when there is no such definition."""
    module, _, qualified = where.partition(":")
    path = src.joinpath(*module.split(".")).with_suffix(".py")
    if not path.is_file():
        path = src.joinpath(*module.split("."), "__init__.py")
    if not path.is_file():
        return None
    scope: list[ast.stmt] = ast.parse(path.read_text(encoding="utf-8")).body
    node: ast.stmt | None = None
    for name in qualified.split("."):
        node = next(
            (
                n
                for n in scope
                if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and n.name == name
            ),
            None,
        )
        if node is None:
            return None
        scope = getattr(node, "body", [])
    assert node is not None and node.end_lineno is not None
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    return node.end_lineno - first + 1


def overgrown(src: Path, sizes: Mapping[str, int] = SIZES) -> list[str]:
    """The definitions of ``sizes`` over their limit, and those no longer found."""
    problems = []
    for where, limit in sorted(sizes.items()):
        n = definition_lines(src, where)
        if n is None:
            problems.append(f"{where} is gone: update SIZES in tests/test_architecture.py")
        elif n > limit:
            problems.append(f"{where} has {n} lines, over its limit of {limit}")
    return problems


# ----------------------------------------------------------------------------- the rule


@pytest.fixture(scope="module")
def graph() -> dict[str, dict[str, int]]:
    found = read_graph(SRC)
    assert "hero.cli" in found and "hero.llm.client" in found, f"no hero package under {SRC}"
    return found


@pytest.mark.slow
def test_every_module_has_a_layer(graph: Graph) -> None:
    problems = unplaced(graph)
    assert not problems, "\n".join(problems)


def test_no_module_imports_a_layer_above_it(graph: Graph) -> None:
    problems = upward_imports(graph)
    assert not problems, "imports must point down the layers:\n" + "\n".join(problems)


def test_no_import_cycles(graph: Graph) -> None:
    found = cycles(graph)
    assert not found, "modules import each other in a circle:\n" + "\n".join(found)


def test_no_module_is_over_its_size() -> None:
    problems = oversized(module_lines(SRC))
    assert not problems, "\n".join(problems)


def test_the_top_level_keeps_the_records_and_foundations_alone() -> None:
    loose = loose_modules(SRC)
    assert len(loose) <= MAX_TOP_LEVEL_MODULES, (
        f"src/hero/ holds {len(loose)} loose modules ({', '.join(loose)}), over "
        f"{MAX_TOP_LEVEL_MODULES}: put the new one in the package of its subject"
    )


def test_the_round_loop_the_agent_loop_and_the_command_line_keep_their_size() -> None:
    problems = overgrown(SRC)
    assert not problems, "\n".join(problems)


def test_the_tests_mirror_the_package() -> None:
    """tests/<package>/ holds the tests of src/hero/<package>/ (tests/e2e/ what runs hero
    whole), and no test module imports another: what tests share lives in conftest.py,
    helpers.py and the *_support.py modules."""
    tests = REPO_ROOT / "tests"
    problems = []
    for folder in sorted(p for p in tests.rglob("*") if p.is_dir()):
        rel = folder.relative_to(tests)
        if rel.parts[0] in ("e2e", "data") or "__pycache__" in rel.parts:
            continue
        if not (SRC / "hero" / rel / "__init__.py").is_file():
            problems.append(f"tests/{rel}/ names no package of src/hero/")
    for path in sorted(tests.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                if name.split(".")[0].startswith("test_"):
                    rel_path = path.relative_to(REPO_ROOT)
                    problems.append(f"{rel_path}:{node.lineno} imports the test module {name}")
    assert not problems, "\n".join(problems)


# ----------------------------------------------------------------------------- the checker


def test_checker_reports_a_cycle_an_upward_import_and_an_unplaced_module() -> None:
    fake: dict[str, dict[str, int]] = {
        "hero.llm.client": {"hero.run.pipeline": 3},  # layer 10 -> layer 6: upward
        "hero.run.pipeline": {"hero.roles.worker": 4},
        "hero.roles.worker": {"hero.llm.client": 5},  # closes the circle client -> ... -> client
        "hero.config.loader": {"hero.state": 6},  # same layer both ways: a cycle, not upward
        "hero.state": {"hero.config.loader": 7, "hero.errors": 8},
        "hero.errors": {},
        "hero.mystery": {"hero.errors": 9},
    }

    assert upward_imports(fake) == [
        "hero.llm.client (layer 10) imports hero.run.pipeline (layer 6, above it) at line 3"
    ]
    assert cycles(fake) == [
        "hero.config.loader -> hero.state -> hero.config.loader",
        "hero.llm.client -> hero.run.pipeline -> hero.roles.worker -> hero.llm.client",
    ]
    assert [p.split()[0] for p in unplaced(fake)] == ["hero.mystery"]


def test_reader_sees_function_level_relative_and_submodule_imports(tmp_path: Path) -> None:
    files = {
        "hero/__init__.py": "",
        "hero/errors.py": "class HeroError(Exception): ...\n",
        "hero/llm/__init__.py": "",
        "hero/llm/client.py": "def make():\n    from hero.run.pipeline import run\n    return run\n",
        "hero/run/__init__.py": "",
        "hero/run/pipeline.py": "from ..errors import HeroError\n\ndef run(): ...\n",
        "hero/agent/__init__.py": "from hero.agent import tools\n",
        "hero/agent/tools/__init__.py": "from ..loop import step\n",
        "hero/agent/tools/bash.py": (
            "import hero.errors\nfrom hero.llm import client\nfrom ..loop import step\n"
        ),
        "hero/agent/loop.py": "from hero.agent.tools import bash\n\ndef step(): ...\n",
    }
    for name, source in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(source)

    found = read_graph(tmp_path)

    assert found == {
        "hero": {},
        "hero.errors": {},
        "hero.llm": {},
        "hero.run": {},
        "hero.llm.client": {"hero.run.pipeline": 2},
        "hero.run.pipeline": {"hero.errors": 1},
        "hero.agent": {"hero.agent.tools": 1},
        "hero.agent.tools": {"hero.agent.loop": 1},
        "hero.agent.tools.bash": {"hero.errors": 1, "hero.llm.client": 2, "hero.agent.loop": 3},
        "hero.agent.loop": {"hero.agent.tools.bash": 1},
    }
    assert upward_imports(found) == [
        "hero.llm.client (layer 10) imports hero.run.pipeline (layer 6, above it) at line 2"
    ]
    assert cycles(found) == ["hero.agent.loop -> hero.agent.tools.bash -> hero.agent.loop"]


def test_size_checker_reports_long_modules_definitions_and_loose_files(tmp_path: Path) -> None:
    files = {
        "hero/__init__.py": "",
        "hero/cli.py": "x = 1\n" * 81,
        "hero/errors.py": "x = 1\n" * 5,
        "hero/run/__init__.py": "",
        "hero/run/pipeline.py": (
            "class StoryRun:\n" + "    x = 1\n" * 400 + "\n\ndef helper():\n    return 1\n"
        ),
        "hero/agent/__init__.py": "",
        "hero/agent/loop.py": "@decorated\ndef run_agent():\n"
        + "    x = 1\n" * 67
        + "    return x\n",
    }
    for name, source in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(source)

    lines = module_lines(tmp_path)

    assert lines["hero.cli"] == 81 and lines["hero.run.pipeline"] == 405
    assert oversized(lines, limit=404) == [
        "hero.cli has 81 lines, over its limit of 80: split it along its subjects",
        "hero.run.pipeline has 405 lines, over its limit of 404: split it along its subjects",
    ]
    assert loose_modules(tmp_path) == ["cli", "errors"]
    assert definition_lines(tmp_path, "hero.run.pipeline:StoryRun") == 401
    assert definition_lines(tmp_path, "hero.agent.loop:run_agent") == 70  # the decorator too
    assert overgrown(tmp_path, {**SIZES, "hero.run.pipeline:Gone": 1}) == [
        "hero.run.pipeline:Gone is gone: update SIZES in tests/test_architecture.py",
        "hero.run.pipeline:StoryRun has 401 lines, over its limit of 400",
    ]
