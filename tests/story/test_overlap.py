"""The overlap rule (hero.story.overlap): two scopes overlap when some path could match a
glob of each; an unscoped story overlaps everything on its repository; other repositories
never. Each "no overlap" here is checked against the scope check's own matcher too, on
paths that match one glob, so the rule and the check cannot drift apart."""

from __future__ import annotations

import random

import pytest

from hero.agent.tools.scope import _Glob
from hero.story.overlap import Scoped, globs_overlap, overlapping, scopes_overlap

OVERLAP = [
    ("src/app.py", "src/app.py"),  # the same file
    ("src", "src/app/views.py"),  # a directory covers what is under it
    ("src/", "src/app.py"),  # trailing slash: still the directory's content
    ("./src/app", "/src/app/x.py"),  # ./ and / anchor at the root, as the check reads them
    ("src/**", "src/deep/x.py"),
    ("src/**/*.py", "src/a/b.md"),  # ** spans components: not told apart, an overlap
    ("*.py", "docs/readme.md"),  # a name at any depth: docs/readme.md/x.py matches both
    ("README.md", "src/app.py"),  # same: a directory named app.py may hold a README.md
    ("src", "docs"),  # no "/": a name at any depth, so docs/src matches both
    ("*.py", "*.md"),  # x.py/y.md
    ("src/*.py", "src/app.py"),  # a pattern meets a name it matches
    ("src/test_*", "src/*.py"),  # test_x.py
    ("src/a*", "src/*b"),  # ab
    ("{src,lib}/x.py", "lib"),  # a choice
    ("src/[ab].py", "src/a.py"),  # a class: told apart by its fixed start and end only
    ("src/[ab].py", "src/c.py"),  # so this one is counted as an overlap (conservative)
    (".", "src/app.py"),  # the whole tree
    ("/", "docs"),
    ("**", "docs"),
    ("src/a{b,[c]}", "src/x"),  # a class and a brace in one glob: not decided, an overlap
]

APART = [
    ("src/app.py", "src/web.py"),
    ("src/app", "src/web"),
    ("/src", "/docs"),
    ("src/app/x.py", "docs/x.py"),
    ("docs/*.md", "docs/*.txt"),  # their fixed ends differ
    ("src/a*", "src/b*"),  # their fixed starts differ
    ("src/*.py", "src/app.md"),
    ("{src,lib}/x.py", "docs/x.py"),
    ("src/?.py", "src/ab.py"),  # ? is one character
    ("/src", "docs/**"),  # stops before the ** is reached
]


@pytest.mark.parametrize(("a", "b"), OVERLAP)
def test_globs_that_could_match_one_path_overlap(a: str, b: str) -> None:
    assert globs_overlap(a, b)
    assert globs_overlap(b, a)  # symmetric


@pytest.mark.parametrize(("a", "b"), APART)
def test_globs_no_path_can_match_both_do_not(a: str, b: str) -> None:
    assert not globs_overlap(a, b)
    assert not globs_overlap(b, a)


@pytest.mark.parametrize(
    ("a", "b", "path"),
    [
        ("src", "src/app/views.py", "src/app/views.py"),
        ("*.py", "docs/readme.md", "docs/readme.md/x.py"),
        ("*.py", "*.md", "x.py/y.md"),
        ("src/test_*", "src/*.py", "src/test_x.py"),
        ("{src,lib}/x.py", "lib", "lib/x.py"),
    ],
)
def test_a_path_the_scope_check_puts_in_both(a: str, b: str, path: str) -> None:
    """The overlaps above are real: the scope check itself covers the path with both."""
    assert _Glob.of(a).covers(path, False) and _Glob.of(b).covers(path, False)


@pytest.mark.parametrize(
    ("a", "b", "paths"),
    [
        ("src/app", "src/web", ["src/app", "src/app/x.py", "src/web/app"]),
        ("/src", "/docs", ["src/docs", "docs/src", "src/x"]),
        ("docs/*.md", "docs/*.txt", ["docs/a.md", "docs/a.txt", "docs/a.md/b.txt"]),
        ("src/a*", "src/b*", ["src/ab", "src/ba", "src/a/b"]),
        ("/src", "docs/**", ["src/docs/x", "docs/src", "src"]),
    ],
)
def test_apart_for_the_scope_check_too(a: str, b: str, paths: list[str]) -> None:
    for path in paths:
        assert not (_Glob.of(a).covers(path, False) and _Glob.of(b).covers(path, False)), path


def test_an_unscoped_story_overlaps_everything_on_its_repository() -> None:
    assert scopes_overlap((), ("docs/x.md",))
    assert scopes_overlap(("src/app.py",), ())
    assert scopes_overlap((), ())


def test_scopes_overlap_when_any_glob_of_each_does() -> None:
    assert scopes_overlap(("docs/a.md", "src/app.py"), ("/lib", "/src"))
    assert not scopes_overlap(("docs/a.md", "src/app.py"), ("/lib", "src/web.py"))


def test_stories_on_different_repositories_never_overlap() -> None:
    a = Scoped("us-1", "/repo/one", ())
    b = Scoped("us-2", "/repo/two", ())
    c = Scoped("us-3", "/repo/one", ("src",))
    assert overlapping([a, b, c]) == {"us-1": ("us-3",), "us-3": ("us-1",)}


def test_overlapping_names_every_pair_in_order_and_leaves_out_the_rest() -> None:
    stories = [
        Scoped("a", "r", ("src/app.py",)),
        Scoped("b", "r", ("/docs",)),
        Scoped("c", "r", ("/src",)),
        Scoped("d", "r", ()),
    ]
    assert overlapping(stories) == {
        "a": ("c", "d"),
        "b": ("d",),
        "c": ("a", "d"),
        "d": ("a", "b", "c"),
    }
    assert overlapping([Scoped("a", "r", ("/src",)), Scoped("b", "r", ("docs/",))]) != {}
    assert overlapping([Scoped("a", "r", ("/src",)), Scoped("b", "r", ("/docs",))]) == {}


def test_a_pathological_glob_is_an_overlap_not_a_hang() -> None:
    many = "/".join(["{a,b,c,d}"] * 8)  # 4**8 alternatives
    assert globs_overlap(many, "z/z")


def test_overlapping_finds_every_pair_the_pairwise_rule_finds() -> None:
    """overlapping() looks only at the pairs that may meet (a tree of fixed starts): on many
    random scopes it finds exactly the pairs scopes_overlap finds, one by one."""
    rng = random.Random(33)
    parts = ["src", "docs", "a", "b", "*.py", "a*", "*b", "?", "[ab]", "{a,b}", "x.md"] * 3
    parts += ["**", "{src,docs/a}"]

    def glob() -> str:
        text = "/".join(rng.choice(parts) for _ in range(rng.randint(1, 4)))
        return rng.choice(["/", "/", "./", ""]) + text + rng.choice(["", "/"])

    for _ in range(30):
        stories = [
            Scoped(
                f"s{n}",
                rng.choice(["r1", "r1", "r2"]),
                tuple(glob() for _ in range(rng.choice([0, 1, 1, 2, 3]))),
            )
            for n in range(25)
        ]
        expected: dict[str, list[str]] = {}
        for a in stories:
            for b in stories:
                if a is not b and a.repo == b.repo and scopes_overlap(a.scope, b.scope):
                    expected.setdefault(a.key, []).append(b.key)
        assert overlapping(stories) == {k: tuple(v) for k, v in expected.items()}
