"""Extraction: score every checkpoint of a model on a panel's instances and fill the panel file."""
