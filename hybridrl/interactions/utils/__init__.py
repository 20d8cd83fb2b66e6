"""Interaction helpers at verl's paths (``verl.interactions.utils``)."""
