"""``torch.compile`` backends distrl provides to torch (entry points), not worker policy backends."""
