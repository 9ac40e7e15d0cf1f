"""The target layer: loading the target model, its KV-cached forward, runtime and sampling settings."""
