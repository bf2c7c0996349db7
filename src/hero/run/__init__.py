"""Running a story: the round loop (``pipeline``), how a run starts (``start``), the story's
repository (``workspace``), budgets, events, cancelling, alerts and housekeeping, and the
services the commands call to run one (``launch``, ``adhoc``, ``dryrun``, ``demo``)."""
