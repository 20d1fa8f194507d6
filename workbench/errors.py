"""The project's own exceptions: each carries a message a user can act on (it names the field, row,
path or command at fault). The CLI turns them into one line on stderr and exit code 1."""


class WorkbenchError(Exception):
    """Base of every error the workbench raises on purpose."""


class ConfigError(WorkbenchError, ValueError):
    """A bad configuration value; the message names the field and what is allowed."""


class StoreError(WorkbenchError):
    """The store cannot be opened, read or written; the message names the path."""


class StoreUnreachable(StoreError):
    """The store's server (object storage, a PostgreSQL catalog) does not answer: the connection is
    refused, drops or times out. Writers that can wait retry on it (`workbench.store.group`)."""


class DataError(WorkbenchError, ValueError):
    """Bad input data (a data set file, a model directory); the message names the row or path."""


class ControlError(WorkbenchError):
    """A control command that cannot be issued (unknown run, unknown command, bad arguments)."""
