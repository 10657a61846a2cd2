"""Docker tests check, as integration tests do, that they left nothing behind (containers
included)."""

from tests.integration.conftest import nothing_left_behind

__all__ = ["nothing_left_behind"]
