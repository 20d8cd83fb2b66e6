"""Trainers and their command-line entry points (main_ppo, ...)."""
