"""Tool helpers at verl 0.5's paths (``verl.tools.utils``)."""
