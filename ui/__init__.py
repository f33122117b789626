"""What a user sees: progress, status lines, tables, and silencing third-party noise."""
