"""Studies: many training runs of one budget, trained side by side and scored (palkit study)."""
