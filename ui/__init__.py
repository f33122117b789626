"""What a user sees: progress, status lines, tables and plots."""
