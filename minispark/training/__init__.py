"""Training: recipes, anchor batches, losses, memory planning, held-out scoring, the trainer."""
