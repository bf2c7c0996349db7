#!/usr/bin/env python
"""hero benchmark: ranking a repository's memory for a story, and the candidates for it.

    python bench/recall.py            # about 40 s on 2 cores
    python bench/recall.py --runs 5   # fewer launches per candidate: about 30 s

hero.memory.recall ranks the facts of a repository's memory against a story with BM25, over
the terms of ``hero.memory.recall.tokens`` (lower-case words, a plural's ``s`` off, common
words out). Every candidate ranks those same terms:

- ``hero (pure Python)``: hero.memory.recall.relevance, Okapi BM25 with Lucene's weights
  (k1 1.5, b 0.75) in a few lines of Python;
- ``bm25s``: the ``bm25s`` package (on numpy), as hero.memory.recall called it until it had
  its own;
- ``sqlite fts5``: the standard library's ``sqlite3``, an FTS5 table in memory and its
  ``bm25()`` (k1 1.2, b 0.75, fixed by SQLite);
- ``rank_bm25``: ``rank_bm25.BM25Okapi`` (on numpy).

Rows, for each candidate:

- **installed**: the bytes of the files its distribution and what it requires installed
  (their ``RECORD``s), as found in this interpreter's environment;
- **import**, in a fresh interpreter (the module its first ranking imports), and the **first
  ranking of a process** (that import, and ranking 300 facts), median of ``--runs``
  launches, the candidates taking turns;
- **ranking N facts** for a story (N = 50, 300, 1000; generated facts shaped as hero's
  learner writes them), warm, median, the candidates taking turns;
- **agreement with bm25s** (the ranking hero used before its own): on 60 generated memories
  and stories, the share where the ranked facts (those with a word of the story's, in the
  order ``pick`` takes them) are the same list, where the facts told within 800 tokens
  (``memory_recall_tokens``'s default) are the same, and where the first fact is the same;
- **a hand-made memory** (30 facts of a web shop) and 12 stories, each with the facts it
  should be told: how often the first fact is one of them, how many are in the top 3 and
  the top 5;
- **the memory benchmark's stories** (bench/memory.py): the facts each story is told, from
  the facts that benchmark's memory holds by then; the same as bm25s's, or not.

A candidate whose package is not installed is said so (``pip install bm25s rank_bm25`` to
compare them all). A report, not a test: it prints a table and exits 0.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import inspect
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from report import Report, env_line, median, print_report, run_sections

from hero.llm.usage import estimate_text
from hero.memory.facts import Fact, Role, Source, new_fact
from hero.memory.recall import relevance, render_facts, story_query, tokens
from hero.redact import Redactor
from hero.story.format import parse_story

SIZES = (50, 300, 1000)
#: memory_recall_tokens' default: what "the facts told" means in the rows.
BUDGET = 800
#: The number of facts the first ranking of a process ranks.
FIRST_N = 300
Rank = Callable[[Sequence[Fact], str], list[float]]


# --------------------------------------------------------------------------- the candidates


def _terms(fact: Fact) -> list[str]:
    """A fact's terms, as hero.memory.recall ranks them: its kind and its text."""
    return tokens(f"{fact.kind.value} {fact.text}")


def rank_bm25s(facts: Sequence[Fact], query: str) -> list[float]:
    """The bm25s package's BM25 (its defaults: Lucene's weights)."""
    import bm25s

    wanted = tokens(query)
    if not facts or not wanted:
        return [0.0] * len(facts)
    index = bm25s.BM25()
    index.index([_terms(f) or ["\0"] for f in facts], show_progress=False)
    return [float(s) for s in index.get_scores(wanted)]


def rank_fts5(facts: Sequence[Fact], query: str) -> list[float]:
    """SQLite's FTS5: the facts' terms in a table in memory, ranked by its bm25()."""
    import sqlite3

    wanted = tokens(query)
    scores = [0.0] * len(facts)
    if not facts or not wanted:
        return scores
    db = sqlite3.connect(":memory:")
    try:
        # the terms are hero's already: the tokenizer only splits them at the spaces
        db.execute(
            "create virtual table f using fts5(terms, tokenize=\"unicode61 tokenchars '_.-'\")"
        )
        db.executemany(
            "insert into f(rowid, terms) values (?, ?)",
            ((i, " ".join(_terms(f))) for i, f in enumerate(facts)),
        )
        match = " OR ".join(f'"{w}"' for w in wanted)
        for rowid, score in db.execute("select rowid, -bm25(f) from f where f match ?", (match,)):
            scores[rowid] = float(score)
    finally:
        db.close()
    return scores


def rank_rank_bm25(facts: Sequence[Fact], query: str) -> list[float]:
    """rank_bm25's BM25Okapi (k1 1.5, b 0.75; a common word's weight floored)."""
    from rank_bm25 import BM25Okapi

    wanted = tokens(query)
    if not facts or not wanted:
        return [0.0] * len(facts)
    index = BM25Okapi([_terms(f) for f in facts])
    return [float(s) for s in index.get_scores(wanted)]


@dataclass(frozen=True)
class Candidate:
    name: str
    rank: Rank
    imports: str
    """The module its first ranking imports ("": none but hero's own)."""
    dists: tuple[str, ...]
    """The distributions it adds to an install (what they require is counted too)."""


CANDIDATES = (
    Candidate("hero (pure Python)", relevance, "", ()),
    Candidate("bm25s", rank_bm25s, "bm25s", ("bm25s",)),
    Candidate("sqlite fts5", rank_fts5, "sqlite3", ()),
    Candidate("rank_bm25", rank_rank_bm25, "rank_bm25", ("rank_bm25",)),
)
REFERENCE = "bm25s"


def available(c: Candidate) -> str:
    """Why ``c`` cannot run here ("": it can)."""
    if c.imports == "sqlite3":
        import sqlite3

        try:
            sqlite3.connect(":memory:").execute("create virtual table t using fts5(x)")
        except sqlite3.OperationalError as exc:
            return f"this Python's SQLite has no FTS5 ({exc})"
        return ""
    for dist in c.dists:
        try:
            importlib.metadata.distribution(dist)
        except importlib.metadata.PackageNotFoundError:
            return f"not installed (pip install {dist})"
    return ""


# --------------------------------------------------------------------------- install size


def installed_bytes(dists: Iterable[str]) -> dict[str, int]:
    """The bytes each of ``dists``, and each distribution they require (not for an extra),
    installed: the files of their RECORDs that exist."""
    seen: dict[str, int] = {}
    todo = list(dists)
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        size = 0
        for f in dist.files or ():
            path = Path(str(f.locate()))
            if path.is_file():
                size += path.stat().st_size
        seen[name] = size
        for req in dist.requires or ():
            name = re.match(r"[A-Za-z0-9._-]*", req).group()  # type: ignore[union-attr]
            if name and "extra ==" not in req:
                todo.append(name)
    return seen


def size_row(c: Candidate) -> str:
    if not c.dists and c.imports:
        return "0 (standard library)"
    if not c.dists:
        return f"0 (hero's own code: {len(inspect.getsource(c.rank).splitlines())} lines)"
    sizes = installed_bytes(c.dists)
    parts = " + ".join(f"{name} {mb(b)}" for name, b in sorted(sizes.items(), key=lambda x: -x[1]))
    return f"{mb(sum(sizes.values()))} ({parts})"


def mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.0f} kB"


# --------------------------------------------------------------------------- the facts


R = Redactor(())
SOURCE = Source("earlier", 1, Role.REVIEWER)
MODULES = (
    "orders", "payments", "accounts", "search", "cart", "emails", "catalog", "shipping",
    "invoices", "reports", "auth", "api", "admin", "inventory", "reviews", "coupons",
)  # fmt: skip
THINGS = (
    "total", "discount", "currency", "timezone", "session", "token", "migration", "fixture",
    "cache", "queue", "template", "locale", "webhook", "retry", "timeout", "pagination",
    "serializer", "permission", "logger", "settings", "price", "address", "refund", "status",
)  # fmt: skip
LIBS = ("stripe", "redis", "celery", "elasticsearch", "boto3", "jinja2", "pytz", "babel")
ERRORS = (
    "ModuleNotFoundError: No module named '{lib}'",
    "KeyError: '{thing}'",
    "AssertionError: expected 200, got 500",
    "ImproperlyConfigured: DJANGO_SETTINGS_MODULE is not set",
    "redis.exceptions.ConnectionError: Error 111 connecting to localhost:6379",
    "TypeError: unsupported operand type(s) for +: 'Decimal' and 'float'",
)
#: What hero's learner writes, by kind (hero.roles.learner), and what reviewers say.
TEMPLATES = {
    "command": (
        "`pytest -q tests/test_{m}.py` failed in round 1 (exit 1: {err}) and passed after "
        "the change of round 2",
        "`python manage.py test {m}` failed in round 1 (exit 1: {err}) and passed after the "
        "change of round 3",
    ),
    "convention": (
        "Every {m} view checks the {thing} permission before it reads the {thing2}",
        "Use shop.{m}.{thing} for the {thing2}, never a helper of your own",
        "Name the {thing} fixtures of {m} after the {thing2} they build",
        "Log the {thing} of {m} through the shop logger, never print()",
    ),
    "knowledge": (
        "shop/{m}/{thing}.py: the {thing2} must be a Decimal, never a float",
        "shop/{m}/views.py: the {thing} is read once per request and kept in the {thing2}",
        "shop/{m}/tasks.py: the {thing} goes through a {lib} task, never inline in a request",
    ),
    "failure": (
        "An approach was rejected before review: the worker changed files outside the "
        "story's scope (shop/{m}/{thing}.py)",
        "An approach was rejected before review: files the story may not touch: "
        "settings/{thing}.py",
    ),
    "decision": (
        "The {thing} of {m} is stored in UTC and shown in the customer's {thing2}",
        "{m} keeps the {thing} in {lib}, not in the database",
    ),
}


def generated_facts(n: int, seed: int) -> list[Fact]:
    """``n`` distinct facts of a made-up shop, shaped as hero's learner writes them."""
    rng = random.Random(seed)
    out: dict[str, Fact] = {}
    while len(out) < n:
        kind = rng.choice(tuple(TEMPLATES))
        words = dict(
            m=rng.choice(MODULES),
            thing=rng.choice(THINGS),
            thing2=rng.choice(THINGS),
            lib=rng.choice(LIBS),
        )
        words["err"] = rng.choice(ERRORS).format(**words)
        text = rng.choice(TEMPLATES[kind]).format(**words)
        if len(out) % 7 == 0:  # some facts are learned in longer words
            text += f" (round {rng.randint(1, 5)} of story {rng.choice(MODULES)}-{len(out)})"
        f = new_fact(kind, text, SOURCE, redactor=R, at=1_700_000_000)
        out[f.id] = f
    return list(out.values())


def generated_query(seed: int) -> str:
    """A story's words (title, goal, criteria, scope, check), as story_query joins them."""
    rng = random.Random(seed)
    m, thing, other = rng.choice(MODULES), rng.choice(THINGS), rng.choice(THINGS)
    return "\n".join(
        [
            f"Add the {thing} to the {m} page",
            f"## Goal\nShow the {thing} of each {m} entry, with its {other}.\n\n"
            f"## Acceptance Criteria\n- [ ] the {thing} is shown\n- [ ] tests cover the {other}",
            f"shop/{m}/**",
            f"pytest -q tests/test_{m}.py",
        ]
    )


# A hand-made memory of a web shop, and stories with the facts they should be told.
SHOP = (
    ("command", "`pytest -q tests/test_orders.py` failed in round 1 (exit 1: ImproperlyConfigured: DJANGO_SETTINGS_MODULE is not set) and passed after the change of round 2"),
    ("knowledge", "shop/payments/stripe.py: never log the card number, not even masked"),
    ("failure", "An approach was rejected before review: the worker changed files outside the story's scope (migrations/0042_auto.py)"),
    ("knowledge", "shop/orders/models.py: Order.total must be a Decimal, floats lose cents"),
    ("command", "`npm run lint` failed in round 1 (exit 2: eslint: 'React' is defined but never used) and passed after the change of round 2"),
    ("convention", "Migrations are written by hand with a descriptive name, never makemigrations --name auto"),
    ("decision", "Dates are stored in UTC and converted to the customer's timezone only in templates"),
    ("knowledge", "shop/emails/templates: every email template needs a plain-text twin"),
    ("failure", "An approach was rejected before review: the worker stopped without a commit"),
    ("convention", "API views return errors as JSON with a code and a message, never HTML"),
    ("command", "`python manage.py test accounts` failed in round 1 (exit 1: redis.exceptions.ConnectionError: Error 111 connecting to localhost:6379) and passed after the change of round 2"),
    ("knowledge", "shop/search/index.py: the search index is rebuilt by a Celery task, never inline in a request"),
    ("decision", "Prices are shown with two decimals and the currency code, e.g. 12.50 EUR"),
    ("knowledge", "shop/accounts/views.py: password reset links expire after 24 hours"),
    ("convention", "Use the logger from shop.logging, never print()"),
    ("command", "`pytest -q tests/test_search.py` failed in round 1 (exit 1: ModuleNotFoundError: No module named 'elasticsearch') and passed after the change of round 2"),
    ("failure", "An approach was rejected before review: files the story may not touch: settings/production.py"),
    ("knowledge", "shop/cart/session.py: the cart lives in the session, not the database, until checkout"),
    ("convention", "Feature flags are read through shop.flags.enabled(name), never from os.environ"),
    ("knowledge", "frontend/src/api.ts: every fetch goes through apiClient so the CSRF token is sent"),
    ("decision", "Product images are resized on upload to 1200 px wide; thumbnails are made lazily"),
    ("knowledge", "shop/orders/export.py: CSV exports use semicolons, as Excel in the shop's locale expects"),
    ("command", "`make docs` failed in round 1 (exit 2: sphinx: undefined label 'orders-api') and passed after the change of round 2"),
    ("convention", "Test functions are named test_<unit>_<behaviour>, as the rest of the suite does"),
    ("knowledge", "shop/shipping/rates.py: shipping rates come from the carrier's API and are cached for an hour"),
    ("decision", "Coupons apply before tax; a coupon never makes a total negative"),
    ("knowledge", "shop/catalog/models.py: a product's slug never changes once published, old links must keep working"),
    ("convention", "Every new page has a test that renders it logged out and logged in"),
    ("knowledge", "shop/inventory/stock.py: stock is decremented in the same transaction as the order is saved"),
    ("decision", "Admin actions are logged to the audit table with the user and the time"),
)  # fmt: skip
#: (story file text, the SHOP facts it should be told, by index)
SHOP_STORIES = (
    ("Refund a card payment", "Add a refund endpoint to the payments API: it refunds a Stripe card payment and answers errors in JSON.", "shop/payments/**", "pytest -q tests/test_payments.py", (1, 9)),
    ("Export orders for accounting", "Accounting wants a CSV export of the month's orders, opened in Excel.", "shop/orders/**", "pytest -q tests/test_orders.py", (21, 0)),
    ("Confirm an order by email", "Send the customer an email template confirming the order.", "shop/emails/**", "pytest -q tests/test_emails.py", (7,)),
    ("Show order dates in the customer's timezone", "The order page shows dates in UTC; show them in the customer's timezone.", "shop/orders/**", "pytest -q tests/test_orders.py", (6,)),
    ("Discounts in the order total", "Apply a discount to the order total; the total must stay exact to the cent.", "shop/orders/**", "pytest -q tests/test_orders.py", (3, 25, 0)),
    ("Better search results", "Rank search results by popularity after a reindex of the search index.", "shop/search/**", "pytest -q tests/test_search.py", (11, 15)),
    ("Reset a password from the login page", "Let customers reset their password from the login page, with a link by email.", "shop/accounts/**", "python manage.py test accounts", (13, 10)),
    ("Keep the cart after login", "The cart is lost when a customer logs in; keep its items in the session.", "shop/cart/**", "pytest -q tests/test_cart.py", (17,)),
    ("Hide the new checkout behind a flag", "Put the new checkout behind a feature flag, off by default.", "shop/checkout/**", "pytest -q tests/test_checkout.py", (18,)),
    ("Product image gallery", "Show several images per product, with thumbnails, resized on upload.", "shop/catalog/**", "pytest -q tests/test_catalog.py", (20,)),
    ("Document the orders API", "Write the reference of the orders API in the docs.", "docs/**", "make docs", (22,)),
    ("A discount code field", "Add a discount code field to coupons, with its migration.", "shop/coupons/**", "pytest -q tests/test_coupons.py", (5, 25)),
)  # fmt: skip


def shop_facts() -> list[Fact]:
    return [new_fact(k, t, SOURCE, redactor=R, at=1_700_000_000) for k, t in SHOP]


def query_of(text: str) -> str:
    """What ``pick`` ranks a story's facts by (story_query of the story file ``text``)."""
    with tempfile.TemporaryDirectory(prefix="hero-bench-recall-") as tmp:
        path = Path(tmp) / "story.md"
        path.write_text(text)
        return story_query(parse_story(path))


def shop_story(title: str, goal: str, scope: str, check: str) -> str:
    return (
        f"---\nid: s\ntitle: {json.dumps(title)}\nscope:\n  - {json.dumps(scope)}\n"
        f"verify:\n  - {json.dumps(check)}\n---\n\n## Goal\n{goal}\n\n"
        "## Acceptance Criteria\n- [ ] it works and its tests pass\n"
    )


# --------------------------------------------------------------------------- ranking, told


def ranked(facts: Sequence[Fact], scores: Sequence[float]) -> list[Fact]:
    """The facts with a word of the story's, in the order ``pick`` takes them (score, then
    id)."""
    pairs = ((s, f) for s, f in zip(scores, facts, strict=True) if s > 0)
    return [f for _, f in sorted(pairs, key=lambda sf: (-round(sf[0], 6), sf[1].id))]


def told(order: Sequence[Fact], budget: int = BUDGET) -> list[Fact]:
    """What ``pick`` tells from ``order`` (no always-on facts among them): each fact taken
    while the section still fits ``budget``."""
    chosen: list[Fact] = []
    for f in order:
        if estimate_text(render_facts([*chosen, f])) <= budget:
            chosen.append(f)
    return chosen


# --------------------------------------------------------------------------- the sections


def rankings(cands: Sequence[Candidate], repeat: int) -> dict[tuple[str, int], float]:
    """Warm medians of ranking N facts for a story, by candidate and N, the candidates taking
    turns (a neighbour's load slows them alike); ``terms``: making the facts' terms alone."""
    rankers: dict[str, Rank] = {c.name: c.rank for c in cands}
    rankers["terms"] = lambda facts, _query: [len(_terms(f)) for f in facts]
    out: dict[tuple[str, int], float] = {}
    for n in SIZES:
        facts = generated_facts(n, n)
        query = generated_query(1)
        samples: dict[str, list[float]] = {name: [] for name in rankers}
        for rank in rankers.values():
            rank(facts, query)  # warm
        for _ in range(repeat if n < 1000 else max(5, repeat // 3)):
            for name, rank in rankers.items():
                t0 = time.perf_counter()
                rank(facts, query)
                samples[name].append(time.perf_counter() - t0)
        out.update({(name, n): median(xs) for name, xs in samples.items()})
    return out


def probe(name: str) -> dict[str, float | bool]:
    """In this fresh interpreter: the candidate's import, then its first ranking."""
    c = next(c for c in CANDIDATES if c.name == name)
    facts = generated_facts(FIRST_N, 1)
    query = generated_query(1)
    before = bool(c.imports) and c.imports in sys.modules
    t0 = time.perf_counter()
    if c.imports:
        importlib.import_module(c.imports)
    t1 = time.perf_counter()
    c.rank(facts, query)
    t2 = time.perf_counter()
    return {"import": t1 - t0, "first": t2 - t0, "preloaded": before}


def launches(cands: Sequence[Candidate], runs: int) -> dict[str, list[dict[str, float | bool]]]:
    """``runs`` fresh interpreters per candidate, the candidates taking turns."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out: dict[str, list[dict[str, float | bool]]] = {c.name: [] for c in cands}
    for _ in range(runs):
        for c in cands:
            proc = subprocess.run(
                [sys.executable, __file__, "--probe", c.name],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            out[c.name].append(json.loads(proc.stdout))
    return out


def cost(report: Report, cands: Sequence[Candidate], runs: int) -> None:
    starts = launches(cands, runs)
    times = rankings(cands, 31)
    for c in cands:
        report.section(f"{c.name}: what it costs")
        report.add("  installed", size_row(c))
        s = starts[c.name]
        imp = median([float(x["import"]) for x in s]) * 1e3
        label = f"import {c.imports}" if c.imports else "nothing to import"
        note = " (already imported!)" if any(x["preloaded"] for x in s) else ""
        report.add(f"  fresh interpreter: {label}", f"{imp:.1f} ms{note}")
        first = median([float(x["first"]) for x in s]) * 1e3
        report.add(
            f"  first ranking of a process ({FIRST_N} facts, with the import)", f"{first:.1f} ms"
        )
        for n in SIZES:
            t = times[(c.name, n)]
            report.add(f"  ranking {n} facts for a story (warm, median)", f"{t * 1e3:.2f} ms")
    report.notes.append(
        "of each ranking, making the facts' terms (hero.memory.recall.tokens, the same for "
        "all): " + ", ".join(f"{times[('terms', n)] * 1e3:.2f} ms for {n}" for n in SIZES)
    )


def agreement(report: Report, cands: Sequence[Candidate]) -> None:
    ref = next((c for c in cands if c.name == REFERENCE), None)
    if ref is None:
        report.add(f"agreement with {REFERENCE}: {REFERENCE} not installed", "FAILED", "", False)
        return
    cases = [
        (generated_facts(n, 100 + i), generated_query(100 + i)) for n in SIZES for i in range(20)
    ]
    base = [ranked(facts, ref.rank(facts, q)) for facts, q in cases]
    base_told = [told(order) for order in base]
    report.section(
        f"agreement with {REFERENCE} on {len(cases)} generated memories ({'/'.join(map(str, SIZES))} facts)"
    )
    for c in cands:
        if c is ref:
            continue
        orders = [ranked(facts, c.rank(facts, q)) for facts, q in cases]
        same = sum(a == b for a, b in zip(base, orders, strict=True))
        same_told = sum(told(o) == t for o, t in zip(orders, base_told, strict=True))
        same_first = sum(a[:1] == b[:1] for a, b in zip(base, orders, strict=True))
        k = len(cases)
        report.add(
            f"  {c.name}: same ranked list / same facts told / same first",
            f"{same}/{k} / {same_told}/{k} / {same_first}/{k}",
            f"{k}/{k}",
            same_told == k,
        )


def shop(report: Report, cands: Sequence[Candidate]) -> None:
    facts = shop_facts()
    stories = [(query_of(shop_story(t, g, s, c)), want) for t, g, s, c, want in SHOP_STORIES]
    wanted = sum(len(w) for _, w in stories)
    report.section(
        f"a hand-made memory: {len(facts)} facts of a web shop, {len(stories)} stories, "
        f"{wanted} facts they should be told"
    )
    for c in cands:
        first = top3 = top5 = 0
        for query, want in stories:
            order = ranked(facts, c.rank(facts, query))
            ids = {facts[i].id for i in want}
            first += bool(order) and order[0].id in ids
            top3 += sum(f.id in ids for f in order[:3])
            top5 += sum(f.id in ids for f in order[:5])
        report.add(
            f"  {c.name}: first fact wanted / wanted in top 3 / in top 5",
            f"{first}/{len(stories)} / {top3}/{wanted} / {top5}/{wanted}",
        )


def memory_bench(report: Report, cands: Sequence[Candidate]) -> None:
    """The facts bench/memory.py's stories are told, from what its memory holds by then."""
    import memory

    check = f"`{sys.executable} -m unittest -q tests.test_sub`"
    learned = {
        "add-mul": [
            (
                "command",
                f"{check} failed in round 1 (exit 1: {memory.ENV_ERROR}) and passed after the change of round 2",
            )  # fmt: skip
        ],
        "add-div": [("knowledge", f"calc/evaluate.py: {memory.NO_EVAL}")],
    }
    held: list[Fact] = []
    told_by: dict[str, list[str]] = {c.name: [] for c in cands}
    for s in memory.STORIES[1:]:
        held += [new_fact(k, t, SOURCE, redactor=R) for k, t in learned.get(s.id, [])]
        query = query_of(memory.story_text(s))
        for c in cands:
            told_by[c.name].append(
                " ".join(f.kind.value for f in told(ranked(held, c.rank(held, query)))) or "none"
            )
    report.section(
        "bench/memory.py's stories: the facts each is told (beside the always-on convention)"
    )
    ref = told_by.get(REFERENCE)
    for c in cands:
        same = (
            "" if ref is None else ("same as bm25s" if told_by[c.name] == ref else "NOT as bm25s")
        )
        report.add(f"  {c.name}", f"{'; '.join(told_by[c.name])}  {same}".strip())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=11, help="fresh interpreters per candidate")
    ap.add_argument("--probe", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.probe:
        print(json.dumps(probe(args.probe)))
        return 0
    started = time.monotonic()
    print(env_line("bm25s", "numpy", "rank_bm25"), flush=True)
    report = Report()
    cands = []
    for c in CANDIDATES:
        why = available(c)
        if why:
            report.add(f"{c.name}: not measured", why, "", False)
        else:
            cands.append(c)
    run_sections(
        report,
        [
            ("what each costs", lambda: cost(report, cands, max(1, args.runs))),
            ("agreement", lambda: agreement(report, cands)),
            ("a hand-made memory", lambda: shop(report, cands)),
            ("the memory benchmark's stories", lambda: memory_bench(report, cands)),
        ],
    )
    print_report(report, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
