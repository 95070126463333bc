# Type stub for the extension built from native/entangle/module.cc.
from typing import Any

def registrations() -> dict[str, Any]: ...
