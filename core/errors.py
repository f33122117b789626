"""The one base class for failures a user can fix; the CLI prints them as one line."""


class PalkitError(Exception):
    """Bad input, a missing or incompatible file, or a run that cannot go on; says what to do."""


class ConfigError(PalkitError, ValueError):
    """An option, config file, task description or placement that cannot be used as given."""


class DataError(PalkitError, ValueError):
    """A data folder or file is missing or malformed; the message names the file and line."""
