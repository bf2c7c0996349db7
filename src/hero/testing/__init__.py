"""Test doubles that are real: the scripted OpenAI-compatible model server."""
