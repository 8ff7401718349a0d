"""Ingest: discovery, input containers (PDF, TIFF), sources handed by reference, upload inboxes."""
