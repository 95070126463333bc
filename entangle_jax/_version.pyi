# Type stub for _version.py, which the build generates from pyproject.toml.
__version__: str
