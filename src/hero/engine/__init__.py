"""Stories run on many machines: ``hero watch`` (the coordinator) sends them through
Celery to ``hero worker`` processes (``engine: celery`` in config/roles.yaml).

- :mod:`hero.engine.store`: hero's keys in Redis: a lease per story, and the run record,
  traces, story file and progress lines a worker publishes for the coordinator to mirror;
- :mod:`hero.engine.app`: the Celery application and its settings;
- :mod:`hero.engine.worker`: ``hero worker`` and the task that runs one story;
- :mod:`hero.engine.remote`: the coordinator's side of one story (send, mirror, send again);
- :mod:`hero.engine.seal`: the engine key's HMACs: every task signed, every value a worker
  publishes sealed;
- :mod:`hero.engine.trust`: what is read from a task or from Redis, checked before use
  (Redis is hostile input).

Nothing here is imported by hero with ``engine: local``.
"""
