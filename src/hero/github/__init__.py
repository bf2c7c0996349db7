"""GitHub: the REST client hero uses to take stories from issues and answer with pull requests."""
