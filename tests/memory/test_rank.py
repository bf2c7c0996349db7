"""How recall ranks a repository's facts for a story (hero.memory.recall.relevance): Okapi
BM25 in hero's own code, on facts shaped as hero's learner writes them. What the ranking
costs, and how it compares with the libraries, is bench/recall.py's."""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from hero.config.loader import load_config
from hero.llm.scripted import ScriptedModel, text
from hero.llm.usage import estimate_text
from hero.memory import store_for
from hero.memory.facts import Fact, Role, Source, new_fact
from hero.memory.recall import FACTS_HEADING, STOPWORDS, pick, relevance, tokens
from hero.redact import Redactor

R = Redactor(())


def fact(kind: str, words: str) -> Fact:
    return new_fact(kind, words, Source("earlier", 1, Role.PERSON), redactor=R, at=1_700_000_000)


#: A web shop's memory as the learner keeps it: most facts speak of tests.
ORDERS_CHECK = fact(
    "command",
    "`pytest -q tests/test_orders.py` failed in round 1 (exit 1: ImproperlyConfigured: "
    "DJANGO_SETTINGS_MODULE is not set) and passed after the change of round 2",
)
SEARCH_CHECK = fact(
    "command",
    "`pytest -q tests/test_search.py` failed in round 1 (exit 1: ModuleNotFoundError: No "
    "module named 'elasticsearch') and passed after the change of round 2",
)
NAMING = fact(
    "convention", "Test functions are named test_<unit>_<behaviour>, as the rest of the suite does"
)
PAGES = fact("convention", "Every new page has a test that renders it logged out and logged in")
CARDS = fact("knowledge", "shop/payments/stripe.py: never log the card number, not even masked")
CSV = fact(
    "knowledge",
    "shop/orders/export.py: CSV exports use semicolons, as Excel in the shop's locale expects",
)
DATES = fact(
    "decision", "Dates are stored in UTC and converted to the customer's timezone only in templates"
)
SETTINGS = fact(
    "failure",
    "An approach was rejected before review: files the story may not touch: settings/production.py",
)
MEMORY = [ORDERS_CHECK, SEARCH_CHECK, NAMING, PAGES, CARDS, CSV, DATES, SETTINGS]
#: A story's words as story_query joins them: title, body, scope, check.
REFUND = (
    "Refund a card payment\n## Goal\nRefund a Stripe card payment from the order page.\n\n"
    "## Acceptance Criteria\n- [ ] the refund is logged, without the card number\n"
    "shop/payments/**\npytest -q tests/test_payments.py"
)


def order(facts: list[Fact], query: str) -> list[Fact]:
    """The facts with a word of the story's, most relevant first (ties: by id), as
    ``pick`` takes them."""
    scored = [(s, f) for s, f in zip(relevance(facts, query), facts, strict=True) if s > 0]
    return [f for _, f in sorted(scored, key=lambda sf: (-round(sf[0], 6), sf[1].id))]


def test_the_scores_are_those_bm25s_gave_the_same_memory() -> None:
    """hero ranked with the bm25s package (0.3.16, Lucene's weights) before its own BM25:
    the same facts and story score as they did then, so every story is told the same."""
    bm25s_scores = [1.975238, 1.655816, 0.876161, 2.600702, 7.707325, 1.451122, 0.0, 0.212058]
    assert relevance(MEMORY, REFUND) == pytest.approx(bm25s_scores, abs=1e-5)


def test_a_fact_sharing_the_storys_rare_words_ranks_above_those_sharing_common_ones() -> None:
    ranked = order(MEMORY, REFUND)
    # the card fact shares "card", "payment", "stripe": words of one fact in eight
    assert ranked[0] == CARDS
    # the others share "test", "pytest", "page", "log": told after it, if the budget allows
    assert set(ranked[1:]) == {ORDERS_CHECK, SEARCH_CHECK, NAMING, PAGES, CSV, SETTINGS}
    assert DATES not in ranked  # no word in common: not told
    chosen = pick(MEMORY, REFUND, budget_tokens=120, estimate=estimate_text)
    assert chosen[0] == CARDS


def test_one_word_rare_in_the_memory_outweighs_one_every_fact_says() -> None:
    stripe = fact("knowledge", "shop/billing.py: Stripe is called through one client")
    small = fact("convention", "Tests are small and fast, one behaviour each")
    facts = [*MEMORY, stripe, small]
    scores = dict(zip(facts, relevance(facts, "Stripe tests"), strict=True))
    assert scores[stripe] > scores[small] > 0


def test_a_short_fact_outranks_a_long_one_saying_the_same_word() -> None:
    short = fact("decision", "Migrations are written by hand")
    long = fact(
        "decision",
        "Migrations are written by hand, reviewed by two people, squashed at every release "
        "and kept small, so that rolling one back never takes the others with it",
    )
    assert order([long, short, *MEMORY], "Add a migration for the discount code") == [short, long]


def test_a_word_every_fact_holds_still_tells_them() -> None:
    """However common a word of the story is in the memory, a fact holding it is told: a
    memory of one fact, or of facts that all say it, is not left unsaid."""
    assert relevance([ORDERS_CHECK], "pytest")[0] > 0
    scores = relevance([ORDERS_CHECK, SEARCH_CHECK], "pytest")
    assert all(s > 0 for s in scores)
    assert pick([ORDERS_CHECK, SEARCH_CHECK], "pytest", budget_tokens=800, estimate=estimate_text)


def test_a_word_the_story_says_again_weighs_again() -> None:
    once = relevance(MEMORY, "search orders")
    assert relevance(MEMORY, "search orders search orders") == pytest.approx([2 * s for s in once])


def test_each_facts_score_is_the_same_whatever_the_order_and_on_every_call() -> None:
    first = dict(zip(MEMORY, relevance(MEMORY, REFUND), strict=True))
    for seed in range(5):
        shuffled = MEMORY[:]
        random.Random(seed).shuffle(shuffled)
        assert dict(zip(shuffled, relevance(shuffled, REFUND), strict=True)) == first
        assert order(shuffled, REFUND) == order(MEMORY, REFUND)


def test_no_facts_or_no_word_of_the_storys_scores_nothing() -> None:
    assert relevance([], REFUND) == []
    assert relevance(MEMORY, "") == [0.0] * len(MEMORY)
    assert relevance(MEMORY, "the and of it is") == [0.0] * len(MEMORY)  # stopwords only


def test_the_terms_drop_common_words_and_keep_names_whole_and_in_parts() -> None:
    assert {"the", "and", "of", "with", "story", "must", "add"} <= STOPWORDS
    assert tokens("The story must add APP_ENV to the tests and the docs") == [
        "app_env",
        "app",
        "env",
        "test",
        "doc",
    ]
    assert tokens("class Address") == ["class", "address"]  # a double s is no plural


def test_recalling_imports_no_numpy(
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    scripted: Callable[..., ScriptedModel],
) -> None:
    """A round's recall, in a fresh interpreter, on a real home's memory: the facts are
    ranked and told, and numpy (which bm25s brought) is never imported."""
    home = make_home(scripted([text("unused")]))
    store_for(load_config(home, roles=(), env={})).add(MEMORY)
    story = write_story(home, "refund", body=REFUND.partition("\n")[2])
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from hero.llm.usage import estimate_text\n"
        "from hero.config.loader import load_config\n"
        "from hero.memory.recall import recall_for\n"
        "from hero.story.format import parse_story\n"
        "config = load_config(Path(sys.argv[1]), env={})\n"
        "got = recall_for(config, parse_story(Path(sys.argv[2])), estimate=estimate_text)\n"
        "print(got.section)\n"
        "print('imported:', *sorted(m for m in ('numpy', 'bm25s') if m in sys.modules))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(home), str(story)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert FACTS_HEADING in proc.stdout
    assert '"shop/payments/stripe.py: never log the card number, not even masked"' in proc.stdout
    assert proc.stdout.rstrip().splitlines()[-1] == "imported:"
