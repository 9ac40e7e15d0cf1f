"""Data: prompts, regenerated answers and the feature cache (design notes §10.1)."""
