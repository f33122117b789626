"""The model, data, training and checkpoints (imports palkit.core and palkit.ui only)."""
