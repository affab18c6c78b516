"""Every test here runs on each store of ``backends.BACKENDS``."""
from tests.store_contract.backends import backend, store  # noqa: F401  (fixtures)
