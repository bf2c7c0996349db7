"""The long-running service: the inbox watcher, the dispatcher, locks and `hero watch`."""
