"""The one exception of the data loaders (the cifar and folder loaders raise it too)."""


class DataError(ValueError):
    """A data file or array that cannot be used; the message names the file and the problem."""
