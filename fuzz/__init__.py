"""Fuzzing palkit's parsers (atheris) and the native runtimes (mutation runner): README.md."""
