# Type stub for _version.py, which the build generates from VERSION.
__version__: str
