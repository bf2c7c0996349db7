"""The model: one client for OpenAI-compatible endpoints (``client``), a story's models
(``models``), one circuit breaker per provider (``breaker``), what calls spent (``usage``), and
hero's own scripted model for demos, tests and benchmarks (``scripted``)."""
