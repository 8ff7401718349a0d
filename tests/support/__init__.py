"""Test helpers shared by several test modules (a chat-completions server on loopback)."""
