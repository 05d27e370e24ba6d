"""The launcher of `medgym env serve` (app.py)."""
