"""hero.plans.dag: checks, order and drawings of a plan's dependency graph."""

from __future__ import annotations

import pytest

from hero.plans.dag import (
    descendants,
    layers,
    leaves,
    problems,
    render_dot,
    render_mermaid,
    render_text,
)

#: a -> b, a -> c, (b, c) -> d: a diamond, d with two parents
DIAMOND = {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]}


def test_a_valid_graph_has_no_problems() -> None:
    assert problems(DIAMOND) == []
    assert problems({}) == []


def test_unknown_and_self_dependencies_are_named_per_story() -> None:
    found = problems({"a": [], "b": ["a", "ghost"], "c": ["c"]})
    assert found == [
        "b: depends on 'ghost', which is not a story of the plan",
        "c: depends on itself",
    ]


def test_a_cycle_is_named_by_its_path() -> None:
    found = problems({"root": [], "a": ["b", "root"], "b": ["a"]})
    assert found == ["cycle: a -> b -> a (each story depends on the next)"]


def test_a_longer_cycle_starts_at_its_first_story_and_follows_dependencies() -> None:
    found = problems({"r": [], "x": ["z"], "y": ["x"], "z": ["y", "r"]})
    assert found == ["cycle: x -> z -> y -> x (each story depends on the next)"]


def test_two_separate_cycles_are_both_named() -> None:
    found = problems({"r": [], "a": ["b"], "b": ["a"], "c": ["d"], "d": ["c", "r"]})
    assert [p.split(" (")[0] for p in found] == ["cycle: a -> b -> a", "cycle: c -> d -> c"]


def test_no_root_is_a_problem() -> None:
    found = problems({"a": ["b"], "b": ["a"]})
    assert found[0].startswith("cycle: a -> b -> a")
    assert found[-1].startswith("no root: every story depends on another")


def test_layers_put_each_story_below_its_deepest_dependency_in_declared_order() -> None:
    nodes = {"z": [], "y": ["z"], "x": [], "w": ["y", "x"], "v": ["x"]}
    assert layers(nodes) == [["z", "x"], ["y", "v"], ["w"]]
    assert layers(DIAMOND) == [["a"], ["b", "c"], ["d"]]


def test_layers_ignore_unknown_dependencies_and_refuse_a_cycle() -> None:
    assert layers({"a": ["ghost"], "b": ["a"]}) == [["a"], ["b"]]
    with pytest.raises(ValueError, match="cycle"):
        layers({"r": [], "a": ["b"], "b": ["a"]})
    with pytest.raises(ValueError, match="cycle"):
        layers({"a": ["a"]})


def test_descendants_and_leaves() -> None:
    assert descendants(DIAMOND, "a") == {"b", "c", "d"}
    assert descendants(DIAMOND, "b") == {"d"}
    assert descendants(DIAMOND, "d") == set()
    assert descendants(DIAMOND, "unknown") == set()
    assert leaves(DIAMOND) == ["d"]
    assert leaves({"a": [], "b": ["a"], "c": []}) == ["b", "c"]


def test_text_drawing_groups_by_layer_and_names_every_parent() -> None:
    titles = {"a": "Model", "b": "API", "c": "UI", "d": "Docs for everything"}
    statuses = {"a": "passed", "b": "running", "c": "not started", "d": "not started"}
    text = render_text(DIAMOND, titles, statuses)
    lines = text.splitlines()
    assert lines[0] == "layer 1"
    assert lines[1].split() == ["a", "Model", "[passed]"]
    assert lines[2] == "layer 2"
    assert lines[3].split() == ["b", "API", "[running]", "<-", "a"]
    assert lines[4].split() == ["c", "UI", "[not", "started]", "<-", "a"]
    assert lines[5] == "layer 3"
    assert lines[6].endswith("[not started]  <- b, c")
    assert "Docs for everything" in lines[6]
    # columns line up: every `[` at one offset
    assert len({line.index("[") for line in lines if "[" in line}) == 1


def test_text_drawing_without_statuses_and_with_a_cycle() -> None:
    text = render_text({"a": [], "b": ["c"], "c": ["b"]}, {"a": "A"})
    assert "[" not in text
    assert "in a cycle (cannot be ordered)" in text
    assert text.splitlines()[-1].split() == ["c", "<-", "b"]
    assert render_text({}) == "(no stories)\n"


def test_mermaid_points_dependencies_to_dependents_with_safe_labels() -> None:
    nodes = {"a": [], "b-2": ["a"], "end": ["a", "b-2"]}
    titles = {"a": 'Say "hi" <b>#1</b>', "b-2": "Two", "end": "Last"}
    statuses = {"a": "passed", "b-2": "not started", "end": "gave_up"}
    text = render_mermaid(nodes, titles, statuses)
    lines = [line.strip() for line in text.splitlines()]
    assert lines[0] == "graph TD"
    assert 'a["a: Say #quot;hi#quot; #lt;b#gt;#35;1#lt;/b#gt;<br/>[passed]"]' in lines
    # ids mermaid would misread get a name of their own; the label keeps the real id
    assert 's_b_2["b-2: Two<br/>[not started]"]' in lines
    assert 's_end["end: Last<br/>[gave_up]"]' in lines
    assert "a --> s_b_2" in lines
    assert "a --> s_end" in lines
    assert "s_b_2 --> s_end" in lines
    assert "class a passed" in lines
    # no raw quote inside a label
    for line in lines:
        if '["' in line:
            assert line.count('"') == 2


def test_mermaid_ids_never_collide() -> None:
    text = render_mermaid({"a-b": [], "s_a_b": ["a-b"]})
    assert [line.strip() for line in text.splitlines()] == [
        "graph TD",
        's_a_b_2["a-b"]',
        's_a_b["s_a_b"]',
        "s_a_b_2 --> s_a_b",
    ]


def test_dot_quotes_and_escapes_labels() -> None:
    nodes = {"a": [], 'b"x': ["a"]}
    titles = {"a": 'back\\slash "q"', 'b"x': "T"}
    text = render_dot(nodes, titles, {"a": "passed", 'b"x': "not started"}, name="my plan")
    lines = text.splitlines()
    assert lines[0] == 'digraph "my plan" {'
    assert lines[-1] == "}"
    assert '  "a" [label="a\\nback\\\\slash \\"q\\"\\n[passed]", fillcolor="#c8e6c9"];' in lines
    assert '  "b\\"x" [label="b\\"x\\nT\\n[not started]"];' in lines
    assert '  "a" -> "b\\"x";' in lines
