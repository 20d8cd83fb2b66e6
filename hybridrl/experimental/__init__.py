"""Experimental interfaces kept at verl 0.5's paths; they may change without notice, as in verl."""
