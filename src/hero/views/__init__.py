"""Read-only views for people: `hero status` and `hero logs`."""
