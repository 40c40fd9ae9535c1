"""Pieces every part uses: the observation normaliser's statistics and the checkpoint format."""
