"""The drafter model: config, layers, heads, draft context, checkpoint formats (DeepSpec interop)."""
