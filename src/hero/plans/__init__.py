"""Plans: a DAG of stories planned together.

``manifest`` the plan folder and its manifest (the record); ``dag`` the graph's checks, order
and drawings; ``gate`` the dependency rule (may this story run now: ready, wait, skip,
unknown); ``finish`` skips under a failure and a finished plan's branch. Drafting a plan
(``hero.plans.drafting``, which calls the planner role) and running one (``hero.daemon.runplan``,
which drives the dispatcher) sit above, beside the commands and the daemon that call them.
"""
