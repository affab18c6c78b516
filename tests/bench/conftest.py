from tests.integration.conftest import module_broker  # noqa: F401  (a broker process per module)
